"""Are the injected wrong solutions like the policy's own? The warm-up's verify, critique and correction rows are
built from injected errors (`data.testbed.injected_wrong`: the policy's error *kinds*, measured; one or two cells
changed under `data.inject_extent=minimal`); RL and test time see the policy's own wrong answers. This compares
them on a finished testbed run:

    python experiments/research/own_vs_injected.py --run runs/bench_cipo/seed0/cipo [--model final] \
        [--questions 256] [--max-new-tokens 32]

On the run's first `--questions` held-out questions: the model's greedy attempts, and for the same questions one
injected wrong answer each, of each `data.inject_extent` the task has (minimal; spread). For the wrong ones of
each source: the error kinds, how many answer positions differ from the gold answer (cells of a grid, nodes of a
path), and what one greedy correction round (`inference.correction.self_correct`, the CIPO replay prompt) makes of
them -- the share fixed (also on the questions the model's own attempt got wrong alone: an injected error on a
question the model can solve is easier to fix for that reason) and the share returned unchanged. Prints a
markdown table (docs/results/cipo_testbed.md quotes it).

With `--correction-format worked_check` (a run whose corrections open with the task's check of the attempt) the
correction writes that check first (budget `--correction-max-new-tokens`), "unchanged" compares the solution after
it, and a second table reads the wrong attempts' checks against the task's (`refine_probe.check_outcome`: exact,
or the first fault -- lines / copy / mark), whether the check flags a fault (a mark other than `ok`), and what the
rewrite after a flag makes of the attempt (`check_reading`).
"""
from __future__ import annotations

import argparse
import collections
import os

import numpy as np

from jaxrl_reason.experiment.probes import check_reading, describe, positions_off, reading_row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a testbed run's workdir (its heldout.jsonl and a model dir)")
    p.add_argument("--model", default="final", help="model directory inside --run (final, sft_model)")
    p.add_argument("--questions", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0, help="draws the injected errors")
    p.add_argument("--correction-format", default="solution", choices=("solution", "worked_check"),
                   help="what the correction writes: the solution, or the task's check of the attempt first")
    p.add_argument("--correction-max-new-tokens", type=int, default=0,
                   help="the correction's budget (0: --max-new-tokens; a worked check needs ~150 more)")
    args = p.parse_args(argv)
    checked = args.correction_format == "worked_check"
    budget = args.correction_max_new_tokens or args.max_new_tokens

    from jaxrl_reason.data.datasets import load_examples
    from jaxrl_reason.data.prompts import solve_prompt
    from jaxrl_reason.data.testbed import correction_solution, injected_wrong, reward, task_of
    from jaxrl_reason.inference.correction import self_correct
    from jaxrl_reason.inference.refine import make_generate
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    examples = load_examples(os.path.join(args.run, "heldout.jsonl"))[:args.questions]
    sources = {(e.meta or {}).get("source") for e in examples}
    if len(sources) != 1:
        raise SystemExit(f"{args.run}/heldout.jsonl: expected one testbed source, found {sorted(map(str, sources))}")
    task = task_of(sources.pop())
    model_dir = os.path.join(args.run, args.model)
    tok_dir = model_dir if os.path.exists(os.path.join(model_dir, "tokenizer.json")) else os.path.join(args.run,
                                                                                                       "tokenizer")
    model, tok = load_pretrained(model_dir), Tokenizer.from_pretrained(tok_dir)
    generate = make_generate(model, tok, temperature=0.0, seed=args.seed, batch_size=32)
    grade = lambda texts, exs: reward(task, texts, exs)  # noqa: E731

    ids = generate(tok.encode_ragged([tok.render_prompt(solve_prompt(e.question)) for e in examples]),
                   max_new_tokens=args.max_new_tokens)
    own = [tok.decode(list(x), skip_special_tokens=True) for x in ids]
    attempt_sets = [("own greedy attempts", own)]
    for extent in ("minimal", "spread") if task.inject_spread else ("minimal",):
        rng = np.random.default_rng(args.seed)
        attempt_sets.append((f"injected, inject_extent={extent}",
                             [task.solution_text(injected_wrong(task, e, rng, extent)[0]) for e in examples]))

    rows, readings, hard = [], [], None
    for name, attempts in attempt_sets:
        res = self_correct(generate, tok, examples, attempts, grade, rounds=1, max_new_tokens=budget,
                           correction_format=args.correction_format)
        wrong = ~res.correct[0]
        solutions = res.texts
        if checked:
            solutions = [correction_solution(task, e.question, a, r) for e, a, r in zip(examples, attempts, res.texts)]
            readings.append(reading_row(name, [check_reading(task, e.question, a, r) for e, a, r, w in zip(
                examples, attempts, res.texts, wrong) if w], res.correct[1][wrong]))
        kinds = collections.Counter(task.error_kind(e.question, task.parse(a))
                                    for e, a, w in zip(examples, attempts, wrong) if w)
        off = [positions_off(task.gold(e), task.parse(a)) for e, a, w in zip(examples, attempts, wrong) if w]
        same = np.array([a.strip() == b.strip() for a, b in zip(attempts, solutions)])
        hard = wrong if hard is None else hard  # the questions the model's own attempt got wrong
        rows.append(f"| {name} | {int(wrong.sum())} / {len(examples)} | "
                    + " · ".join(f"{k} {v}" for k, v in kinds.most_common()) + f" | {describe(off)} | "
                    + f"{res.correct[1][wrong].mean():.3f} | {res.correct[1][wrong & hard].mean():.3f} | "
                    + f"{same[wrong].mean():.3f} |")
    print(f"{args.run}/{args.model}, {len(examples)} held-out questions, greedy\n")
    print("| wrong answers | wrong | error kinds | positions off the gold answer | fixed by one correction | "
          "fixed, on the questions its own attempt got wrong | returned unchanged |\n|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if checked:
        print("\nThe wrong attempts' corrections, their check against the task's check of the attempt:\n")
        print("| wrong answers | wrong | check: exact · lines · copy · mark | a fault flagged | flagged, then "
              "rewritten | fixed after a flag | fixed |\n|---|---|---|---|---|---|---|")
        print("\n".join(readings))


if __name__ == "__main__":
    main()
