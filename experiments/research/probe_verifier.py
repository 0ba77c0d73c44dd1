"""How well can a policy learn to verify its own samples? The RL^V verifier's ceiling, without any RL.

    python experiments/research/probe_verifier.py [--hidden 96 --layers 3] [--sft-steps 450 700] [--verify-questions 2048]

For each SFT length: SFT on worked solutions (as `experiments/train.py` does; the SFT model is cached per model
shape and length under --cache, so later probes of the same policy skip it), greedy held-out accuracy, then the
self-labelled verification warm-up (`train/verify_warmup.py`: sample, label by the reward, class-balance, train
"Yes"/"No") with the probe's data size, steps and learning rate. Prints one markdown row per SFT length:
the policy's accuracy, the share of correct samples, verifier balanced accuracy on held-out questions before and
after, and the verify NLL averaged over each tenth of training (whether more steps would still help).

With `--errors`, the wrong samples of the arithmetic default are also sorted by what went wrong (a step's sum,
an operand copied wrong, a missing or extra step, a box that disagrees with the last line) and by whether a
question's wrong samples repeat one wrong answer (a systematic belief of the policy, which the same weights are
unlikely to flag) or differ (slips).
`--pairs-only` trains the verdict on contrast pairs alone (worked solution vs one-slip copy) and reports accuracy on
held-out pairs; `--init RUN` starts from a train.py run's warmed-up model instead (to continue its warm-up), and
`--vote-questions N` then also scores fresh samples of N held-out questions (maj / weighted / Best-of-N and the
verifier's AUROC within a question). `--error-report DIR/samples.jsonl` sorts an `evaluate.py` run's wrong samples
(and those of each wrong majority) by kind, without training anything.
This is a measurement, not a test: one SFT length at the default size takes ~4 minutes on 2 CPU cores.
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import re
import sys
import time

# the repository root, so the script runs from a checkout without the editable install
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.configs import PRESET_DIR  # noqa: E402
from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

CONFIGS = PRESET_DIR

_STEP_RE = re.compile(r"(-?\d+) ([+\-*]) (-?\d+) = (-?\d+)")
_BOX_RE = re.compile(r"\\boxed\{(-?\d+)\}")


def _compact_steps(solution: str) -> list:
    """(a, b, r) of every `a op b = r` line."""
    return [tuple(int(x) for x in (a, b, r)) for a, _, b, r in _STEP_RE.findall(solution)]


def classify_compact_error(solution: str, operands) -> str:
    """Why a wrong compact `+` chain is wrong: nsteps | copy | arith | box (the first that applies)."""
    steps = _compact_steps(solution)
    if len(steps) != len(operands) - 1:
        return "nsteps"
    running = operands[0]
    for (a, b, r), want_b in zip(steps, operands[1:]):
        if a != running or b != want_b:
            return "copy"
        running = r
    if any(a + b != r for a, b, r in steps):
        return "arith"
    return "box"


def error_table(questions, solutions, labels, samples_per_question: int) -> dict:
    kinds, repeats = collections.Counter(), collections.Counter()
    for start in range(0, len(labels), samples_per_question):
        operands = [int(x) for x in re.findall(r"\d+", questions[start])]
        wrong = [solutions[i] for i in range(start, start + samples_per_question) if not labels[i]]
        for s in wrong:
            kinds[classify_compact_error(s, operands)] += 1
        if len(wrong) >= 2:
            answers = [(_BOX_RE.findall(s) or [None])[-1] for s in wrong]
            repeats["repeated" if len(set(answers)) < len(answers) else "all_different"] += 1
    return {"kinds": dict(kinds), "questions_with_2plus_wrong": dict(repeats)}


def copy_error_kind(solution: str, operands) -> str:
    """Which copy went wrong in a compact `+` chain that `classify_compact_error` files as "copy": the running
    total not carried over, or the line's new operand being a number absent from the question, an earlier operand
    or a later one (the policy lost its place)."""
    running = operands[0]
    for j, ((a, b, r), want_b) in enumerate(zip(_compact_steps(solution), operands[1:])):
        if a != running:
            return "running_total"
        if b != want_b:
            return "later_operand" if b in operands[j + 2:] else "earlier_operand" if b in operands[:j + 1] \
                else "not_in_question"
        running = r
    raise ValueError("copy_error_kind: every line copies its operands right; not a copy error")


def majority_error_report(rows) -> dict:
    """Error kinds in `experiments/evaluate.py` samples (rows of samples.jsonl: question, completions, correct,
    classes): over every wrong sample, and over the samples of the wrong answer that wins a question's majority vote
    where some sample is right (what weighted voting would have to outvote; a tie goes to the answer seen first);
    copy errors split by `copy_error_kind`. For the arithmetic default's compact `+` chains."""
    out = {"wrong": collections.Counter(), "winning_wrong": collections.Counter(), "copy": collections.Counter(),
           "questions_majority_wrong_with_a_right_sample": 0}
    for row in rows:
        operands = [int(x) for x in re.findall(r"\d+", row["question"])]
        correct = [bool(c) for c in row["correct"]]
        for text, ok in zip(row["completions"], correct):
            if not ok:
                kind = classify_compact_error(text, operands)
                out["wrong"][kind] += 1
                if kind == "copy":
                    out["copy"][copy_error_kind(text, operands)] += 1
        answered = collections.Counter(c for c in row["classes"] if c >= 0)
        if not answered or not any(correct):
            continue
        top = answered.most_common(1)[0][0]
        if any(ok for c, ok in zip(row["classes"], correct) if c == top):
            continue
        out["questions_majority_wrong_with_a_right_sample"] += 1
        for text, c in zip(row["completions"], row["classes"]):
            if c == top:
                out["winning_wrong"][classify_compact_error(text, operands)] += 1
    return {k: dict(v) if isinstance(v, collections.Counter) else v for k, v in out.items()}


def nll_by_tenth(history) -> str:
    nll = [h["verify_warmup/nll"] for h in history]
    tenth = max(1, len(nll) // 10)
    return " ".join(f"{sum(nll[i:i + tenth]) / len(nll[i:i + tenth]):.2f}" for i in range(0, len(nll), tenth))


def cut_after_slip(right: str, slipped: str) -> tuple[str, str]:
    """Both solutions up to and including the first line where they differ."""
    a, b = right.splitlines(), slipped.splitlines()
    k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return "\n".join(a[:k + 1]), "\n".join(b[:k + 1])


def pairs_only(model, tokenizer, rc, examples, heldout, args, prompt_fn):
    """--pairs-only: the verdict trained on contrast pairs alone; -> (before, after, train rows, NLL curve, s)."""
    import numpy as np

    from jaxrl_reason.experiment.warmup import verify_contrast_fn
    from jaxrl_reason.inference.verifier import verifier_accuracy, verify_rows
    from jaxrl_reason.train.verify_warmup import contrast_pairs, train_verdicts

    rng = np.random.default_rng([rc.seed, 0x9A1E])
    # the run's check of the task and solution style, with the probe's slip kinds
    slip = functools.partial(verify_contrast_fn(rc, "slips"), kinds=tuple(args.slip_kinds.split(",")))

    def pairs(exs):
        q, s, lab = contrast_pairs(exs, slip, rng)
        if args.cut_at_slip:
            for i in range(0, len(s), 2):
                s[i], s[i + 1] = cut_after_slip(s[i], s[i + 1])
        return q, s, lab
    t = time.time()
    hq, hs, hl = pairs(heldout)
    before = verifier_accuracy(model, tokenizer, hq, hs, hl)
    q, s, lab = pairs(examples)
    history = train_verdicts(model, tokenizer, verify_rows(tokenizer, q, s, lab), examples, steps=args.verify_steps,
                             batch_size=rc.sft.verify_batch_size, solve_batch_size=rc.sft.verify_solve_rows,
                             lr=args.verify_lr, rng=rng, seed=rc.seed, progress=False, prompt_fn=prompt_fn)
    after = verifier_accuracy(model, tokenizer, hq, hs, hl)
    return before, after, len(lab), nll_by_tenth(history), time.time() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(CONFIGS, "rlv.py"))
    p.add_argument("--hidden", type=int, default=0, help="model width (0 = the config's)")
    p.add_argument("--layers", type=int, default=0, help="model depth (0 = the config's)")
    p.add_argument("--intermediate", type=int, default=0, help="SwiGLU size (0 = 3 x width)")
    p.add_argument("--sft-steps", type=int, nargs="+", default=[0], help="SFT lengths to probe (0 = the config's)")
    p.add_argument("--verify-questions", type=int, default=2048, help="warm-up questions sampled for labels")
    p.add_argument("--verify-steps", type=int, default=400)
    p.add_argument("--verify-lr", type=float, default=1e-3)
    p.add_argument("--samples", type=int, default=4, help="samples per question")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = the config's rl one)")
    p.add_argument("--holdout", type=float, default=0.2, help="share of questions held out for the accuracy")
    p.add_argument("--balance", default="subsample", choices=("subsample", "per_question"),
                   help="class balance of the warm-up rows: over all rows, or within each question")
    p.add_argument("--contrast", default="none", choices=("none", "slips"),
                   help="slips: also train on each warm-up question's worked solution (Yes) next to a copy with one "
                        "slip (No; data.arithmetic.slipped_example_solution)")
    p.add_argument("--pairs-only", action="store_true",
                   help="skip sampling: train the verdict on contrast pairs of the --verify-questions alone and report "
                        "balanced accuracy on the pairs of the held-out questions (can the model learn to check?)")
    p.add_argument("--cut-at-slip", action="store_true",
                   help="with --pairs-only: cut both solutions of a pair after the slipped line, so the verdict is "
                        "about the last line only")
    p.add_argument("--slip-kinds", default="result,operand", help="with --pairs-only: slips to draw (result,operand)")
    p.add_argument("--errors", action="store_true", help="also sort the wrong samples by kind (arithmetic task)")
    p.add_argument("--vote-questions", type=int, default=0,
                   help="after the warm-up, also sample --vote-n solutions for this many held-out questions and "
                        "report pass@1 / maj@N / weighted@N / BoN@N as bench_rlv does (0 = skip)")
    p.add_argument("--vote-n", type=int, default=16, help="samples per question for --vote-questions")
    p.add_argument("--cache", default="runs/probe_verifier", help="SFT models and tokenizers are kept here")
    p.add_argument("--init", default="",
                   help="start from a train.py run directory's sft_model/ and tokenizer/ instead of the cached SFT "
                        "model (e.g. to continue the verification warm-up of a bench_rlv arm)")
    p.add_argument("--error-report", default="",
                   help="only sort the wrong samples of an `experiments/evaluate.py --out DIR` run (DIR/samples.jsonl) "
                        "on the arithmetic default by kind, also those of the wrong answers that win a majority "
                        "vote, and exit")
    args = p.parse_args()
    if args.error_report:
        import json

        rows = [json.loads(line) for line in open(args.error_report)]
        print(json.dumps(majority_error_report(rows), indent=2))
        return

    import jax
    from absl import logging
    from flax import nnx

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.model import build_tokenizer
    from jaxrl_reason.experiment.warmup import verify_contrast_fn, warmed_up_policy, without_verify_warmup
    from jaxrl_reason.train.trainer import evaluate_accuracy
    from jaxrl_reason.train.verify_warmup import sample_labelled_solutions, verify_warmup

    logging.set_verbosity(logging.WARNING)
    rows = []
    for sft_steps in args.sft_steps:
        cfg = load_config_file(args.config)
        if args.hidden:
            cfg.model.hidden_size = args.hidden
            cfg.model.intermediate_size = args.intermediate or 3 * args.hidden
        if args.layers:
            cfg.model.num_hidden_layers = args.layers
        if sft_steps:
            cfg.sft.steps = sft_steps
        if cfg.sft.steps <= 0:
            raise SystemExit("probe_verifier needs an SFT warm-up: pass --sft-steps N > 0 or a config with sft.steps")
        if not 0 < args.verify_questions <= cfg.sft.examples:
            raise SystemExit(f"--verify-questions must be in [1, sft.examples={cfg.sft.examples}]: the probe samples "
                             "on warm-up questions only")
        cfg.rl.progress = False
        rc = without_verify_warmup(read_run_config(cfg))  # the probe runs its own verification warm-up
        temperature = args.temperature or rc.rl.temperature
        m = rc.model
        tag = f"h{m.hidden_size}_l{m.num_hidden_layers}_i{m.intermediate_size}_sft{rc.sft.steps}_seed{rc.seed}"
        workdir = os.path.abspath(os.path.join(args.cache, tag))
        if args.init:
            workdir = os.path.abspath(args.init)
            tag = os.path.basename(workdir)
            for need in ("sft_model/config.json", "tokenizer/tokenizer.json"):
                if not os.path.exists(os.path.join(workdir, need)):
                    raise SystemExit(f"--init {args.init}: {need} is missing; pass a train.py run directory that "
                                     "has finished its warm-up")
        os.makedirs(workdir, exist_ok=True)
        task = build_data(rc.data, rc.seed)
        train, heldout, reward_fn, prompt_fn = task.train, task.heldout, task.reward_fn, task.prompt_fn
        tokenizer = build_tokenizer(rc, train, workdir, prompt_fn)
        t = time.time()
        model, _ = warmed_up_policy(rc, tokenizer, task, workdir)  # the SFT model, cached in the workdir
        sft_s = time.time() - t
        greedy = evaluate_accuracy(model, nnx.state(model), tokenizer, heldout, reward_fn,
                                   max_new_tokens=rc.rl.max_new_tokens, batch_size=rc.rl.eval_batch_size,
                                   progress=False, prompt_fn=prompt_fn)["accuracy"]
        examples = train[:args.verify_questions]
        if args.pairs_only:
            res = pairs_only(model, tokenizer, rc, examples, heldout, args, prompt_fn)
            rows.append((tag, sft_s, greedy) + res + (votes(model, tokenizer, heldout, args, rc, temperature),))
            print(f"[{tag}] done", flush=True)
            continue
        if args.errors:
            q, s, lab = sample_labelled_solutions(model, tokenizer, examples[:256], reward_fn,
                                                  samples_per_question=args.samples,
                                                  max_new_tokens=rc.rl.max_new_tokens, temperature=temperature,
                                                  key=jax.random.PRNGKey(rc.seed + 1), prompt_fn=prompt_fn)
            print(f"[{tag}] wrong samples of 256 questions x {args.samples}: {error_table(q, s, lab, args.samples)}",
                  flush=True)
        t = time.time()
        res = verify_warmup(model, tokenizer, examples, reward_fn, steps=args.verify_steps,
                            batch_size=rc.sft.verify_batch_size, solve_batch_size=rc.sft.verify_solve_rows,
                            lr=args.verify_lr, samples_per_question=args.samples,
                            max_new_tokens=rc.rl.max_new_tokens, temperature=temperature,
                            holdout_frac=args.holdout, seed=rc.seed, progress=False, prompt_fn=prompt_fn,
                            balance=args.balance, contrast_fn=verify_contrast_fn(rc, args.contrast), warmup_steps=10)
        curve = nll_by_tenth(res["history"])
        probe_s = time.time() - t
        vote = votes(model, tokenizer, heldout, args, rc, temperature)
        rows.append((tag, sft_s, greedy, res, curve, probe_s, vote))
        print(f"[{tag}] done", flush=True)

    if args.pairs_only:
        print(f"\ncontrast pairs only ({args.slip_kinds} slips{', cut after the slip' if args.cut_at_slip else ''}): "
              f"{args.verify_questions} training questions, {args.verify_steps} steps at lr {args.verify_lr}, "
              f"accuracy on the pairs of the held-out questions\n")
        print("| policy | greedy held-out acc | train rows | held-out rows | bal. acc before | bal. acc after | "
              "acc right / slipped after | verify NLL by tenth of training | seconds (SFT / probe) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for tag, sft_s, greedy, before, after, n_train, curve, probe_s, _ in rows:
            print(f"| {tag} | {greedy:.1%} | {n_train} | {after['rows']} | {before['balanced_acc']:.1%} | "
                  f"{after['balanced_acc']:.1%} | {after['acc_positive']:.1%} / {after['acc_negative']:.1%} | {curve} | "
                  f"{sft_s:.0f} / {probe_s:.0f} |")
    else:
        print_probe_table(rows, args, temperature)
    if args.vote_questions:
        print_vote_table(rows, args, temperature)


def votes(model, tokenizer, heldout, args, rc, temperature):
    """--vote-questions: fresh samples of held-out questions scored by the model itself (None when 0)."""
    from jaxrl_reason.inference.test_time import evaluate

    if not args.vote_questions:
        return None
    return evaluate(model, tokenizer, heldout[:args.vote_questions], n=args.vote_n,
                    max_new_tokens=rc.rl.max_new_tokens, temperature=temperature, seed=rc.seed, progress=False,
                    keep_samples=False)


def print_probe_table(rows, args, temperature):
    print(f"\nverification probe ({args.balance} balance, contrast {args.contrast}): {args.verify_questions} questions x {args.samples} "
          f"samples at T {temperature}, "
          f"{args.verify_steps} steps at lr {args.verify_lr}, {args.holdout:.0%} of questions held out\n")
    print("| policy | greedy held-out acc | correct samples | train rows | held-out rows | bal. acc before | "
          "bal. acc after | verify NLL by tenth of training | seconds (SFT / probe) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tag, sft_s, greedy, res, curve, probe_s, _ in rows:
        print(f"| {tag} | {greedy:.1%} | {res['positive_frac_sampled']:.1%} | {res['rows']} | "
              f"{res['after']['rows']} | {res['before']['balanced_acc']:.1%} | {res['after']['balanced_acc']:.1%} | "
              f"{curve} | {sft_s:.0f} / {probe_s:.0f} |")


def print_vote_table(rows, args, temperature):
    n = args.vote_n
    at = lambda v, s, k: 100 * v["strategies"][s]["mean"][v["ks"].index(k)]  # noqa: E731
    print(f"\ntest-time strategies after the warm-up (no RL): {args.vote_questions} held-out questions x {n} "
          f"samples at T {temperature}, each scored once by the policy itself\n")
    print(f"| policy | pass@1 | maj@{n} | weighted@{n} | BoN@{n} | pass@{n} | verifier bal. acc. | AUROC | "
          "AUROC within a question (questions) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tag, *_, v in rows:
        q = v["verifier"]["self"]
        fmt = lambda x: "n/a" if x is None else f"{100 * x:.1f}"  # noqa: E731
        print(f"| {tag} | {at(v, 'pass', 1):.1f} | {at(v, 'majority', n):.1f} | {at(v, 'weighted', n):.1f} | "
              f"{at(v, 'best_of_n', n):.1f} | {at(v, 'pass', n):.1f} | {fmt(q['balanced_accuracy'])} | "
              f"{fmt(q['auroc'])} | {fmt(q['within_question_auroc'])} ({q['mixed_questions']}) |")


if __name__ == "__main__":
    main()
