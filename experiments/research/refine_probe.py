"""Where does one self-refinement round gain or lose? A probe of a saved testbed model's critique + guided re-solve.

    python experiments/research/refine_probe.py --config jaxrl_reason/configs/testbed_latin_cure_check.py \
        --run runs/bench_cure_check_s0/seed0/grpo --model sft_model [--questions 128] \
        [--repair-steps 150 --repair-guided 2000 --repair-critique 2000] [--attempts RUN[:MODEL]]

One round of `inference.refine.self_refine` (verdict generated, temperature `rl.temperature`) from one sample per
question, then the round's outcome split by the first sample's correctness and the verdict: wrong attempts
re-solved and how many of those came out right (fixed), right attempts re-solved and how many stayed right (kept).
Beside it the baseline a guided re-solve has to beat: one fresh, unguided sample of the same wrongly-answered
questions. With `--repair-steps`, first a short SFT stage on the model (guided re-solve rows and worked-check
critique rows of the config's formats, `data.testbed.auxiliary_rows`, plus as many worked solutions), to see
whether a skill the warm-up lost comes back. With `--attempts`, round 0 is another run's model's sample (same
seed and temperature) and the probed model only critiques and re-solves: which of two models' critics is worse on
the same attempts. With a worked-check critique, each check is compared line by line with the task's check of the
attempt (`check_outcome`: exact, or the first kind of fault: a line missing or extra, a copied cell, a mark; with
`--attempts` only, which gives the probe round 0's texts -- name the probed run itself for its own attempts).
Prints a table; writes nothing.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from against_grpo import load_arm  # noqa: E402
from bench_cure import critique_budget  # noqa: E402
from jaxrl_reason.configs import load_config_file  # noqa: E402


def repair(cfg, model, tokenizer, task, *, steps: int, guided: int, critique: int, seed: int = 7) -> None:
    """`steps` SFT steps on `guided` guided re-solve rows and `critique` critique rows (the config's layouts and
    formats) built from the first warm-up questions, with as many worked solutions; updates `model` in place."""
    from jaxrl_reason.data.prompts import whole_turn_prompt_fn
    from jaxrl_reason.data.testbed import auxiliary_rows
    from jaxrl_reason.experiment.warmup import task_of
    from jaxrl_reason.train.trainer import sft_train

    n = max(guided, critique)
    base = list(task.train[:2 * n])
    rows = auxiliary_rows(task_of(cfg.data.source), base[:n], verify=0, critique=critique, correct=0,
                          guided=guided, seed=seed, guided_layout=cfg.data.guided_layout,
                          critique_format=cfg.data.critique_format)
    sft_train(model, tokenizer, rows + base[n:2 * n], steps=steps, batch_size=cfg.sft.batch_size,
              lr=cfg.sft.own_attempt_lr, warmup_steps=cfg.sft.warmup_steps, seed=seed, progress=False,
              pack=cfg.sft.pack, prompt_fn=whole_turn_prompt_fn(rows, task.prompt_fn))


CHECK_OUTCOMES = ("exact", "lines", "copy", "mark")


def check_outcome(true_check: str, critique: str) -> str:
    """How a worked-check critique's check compares with the task's check of the same attempt, line by line (each
    line: what it copies, then its mark as the last word): "exact"; else the first fault, in line order -- "lines"
    (a line missing, extra or out of place), "copy" (a copied cell differs), "mark" (the copy right, the mark
    not)."""
    want = true_check.split("\n")
    got = critique.split("\n")[:len(want)]
    if got == want:
        return "exact"
    for w, g in zip(want, got + [""] * (len(want) - len(got))):
        if w == g:
            continue
        w_head, g_head = w.split(":", 1)[0], g.split(":", 1)[0]
        if w_head != g_head:
            return "lines"
        return "copy" if w.rpartition(" ")[0] != g.rpartition(" ")[0] else "mark"
    return "lines"


def attempts_of(cfg, model, tokenizer, examples, task, *, seed: int = 0) -> tuple[list, list]:
    """(texts, generated token counts): one sample per question from `model` at the run's temperature -- the
    round 0 `self_refine` draws with the same seed."""
    from jaxrl_reason.inference.refine import decode_ids, make_generate

    generate = make_generate(model, tokenizer, temperature=cfg.rl.temperature, seed=seed)
    ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(task.prompt_fn(e.question)) for e in examples]),
                   max_new_tokens=cfg.rl.max_new_tokens)
    return decode_ids(tokenizer, ids), [len(x) for x in ids]


def probe(cfg, model, tokenizer, examples, task, *, seed: int = 0, generate=None, initial=None,
          initial_tokens=None) -> dict:
    """One refinement round and a fresh-sample baseline -> counts (see the module docstring). `generate`
    (`inference.refine.Generate`) replaces the model's sampler, for a scripted test; `initial` / `initial_tokens`:
    round 0's attempts, already sampled (e.g. by another model, `attempts_of`)."""
    from jaxrl_reason.inference.refine import VERDICT_NO_ERROR, decode_ids, graded_right, make_generate, self_refine

    temp = cfg.rl.temperature
    r = self_refine(model, tokenizer, examples, task.reward_fn, rounds=1, max_new_tokens=cfg.rl.max_new_tokens,
                    critique_max_new_tokens=critique_budget(cfg),
                    temperature=temp, seed=seed, guided_layout=cfg.data.guided_layout,
                    critique_format=cfg.data.critique_format, generate=generate, initial=initial,
                    initial_tokens=initial_tokens)
    right, after = r.correct[0], r.correct[1]
    redo = r.verdicts[0] != VERDICT_NO_ERROR  # an unparsed verdict is re-solved too, as at test time
    wrong_redo = np.flatnonzero(~right & redo)
    fresh_right = 0
    if len(wrong_redo):
        if generate is None:
            generate = make_generate(model, tokenizer, temperature=temp, seed=seed + 1)
        ids = generate(tokenizer.encode_ragged([tokenizer.render_prompt(task.prompt_fn(examples[i].question))
                                                for i in wrong_redo]), max_new_tokens=cfg.rl.max_new_tokens)
        fresh = decode_ids(tokenizer, ids)
        fresh_right = int(graded_right(task.reward_fn, fresh, [examples[i] for i in wrong_redo]).sum())
    out = {"questions": len(examples), "round0": float(right.mean()), "round1": float(after.mean()),
           "wrong_redone": len(wrong_redo), "fixed": int(after[wrong_redo].sum()),
           "fresh_fixed": fresh_right, "wrong_kept": int((~right & ~redo).sum()),
           "right_redone": int((right & redo).sum()), "right_stayed": int((right & redo & after).sum()),
           "right_kept": int((right & ~redo).sum()), "well_formed": float(r.well_formed[0].mean())}
    if cfg.data.critique_format == "worked_check" and initial is not None:  # the attempts' texts are known
        from jaxrl_reason.data.testbed import critique_check, task_of

        testbed_task = task_of(cfg.data.source)
        kinds = np.array([check_outcome(critique_check(testbed_task, e.question, a), c)
                          for e, a, c in zip(examples, initial, r.critiques)])
        # [attempt right / wrong][re-solved or not] -> {outcome: count}: where a wrong verdict comes from
        out["checks"] = {f"{side}_{'redone' if flagged else 'kept'}":
                         {k: int(((right == is_right) & (redo == flagged) & (kinds == k)).sum())
                          for k in CHECK_OUTCOMES}
                         for side, is_right in (("right", True), ("wrong", False)) for flagged in (True, False)}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the run's config file (its formats and layouts)")
    ap.add_argument("--run", required=True, help="the run's workdir (heldout.jsonl, tokenizer/, the model)")
    ap.add_argument("--model", default="final", help="the model's subdirectory of --run (final, sft_model, ...)")
    ap.add_argument("--questions", type=int, default=128, help="held-out questions probed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repair-steps", type=int, default=0, help="SFT steps of a repair stage first (0: none)")
    ap.add_argument("--repair-guided", type=int, default=2000, help="guided re-solve rows of the repair stage")
    ap.add_argument("--repair-critique", type=int, default=2000, help="critique rows of the repair stage")
    ap.add_argument("--attempts", default="", metavar="RUN[:MODEL]",
                    help="round 0 from this run's model (default subdirectory: final), on the same held-out questions")
    args = ap.parse_args(argv)
    cfg = load_config_file(args.config)
    cfg.workdir = args.run
    model, tok, examples, task = load_arm(cfg, args.questions, model=args.model, tokenizer="tokenizer")
    if args.repair_steps:
        repair(cfg, model, tok, task, steps=args.repair_steps, guided=args.repair_guided,
               critique=args.repair_critique)
    initial = initial_tokens = None
    if args.attempts:
        from jaxrl_reason.data.datasets import load_examples
        from jaxrl_reason.models.hf_port import load_pretrained
        from jaxrl_reason.tokenization import Tokenizer

        run, _, sub = args.attempts.partition(":")  # only its model, tokenizer and questions: no second task build
        a_model = load_pretrained(os.path.join(run, sub or "final"))
        a_tok = Tokenizer.from_pretrained(os.path.join(run, "tokenizer"))
        a_examples = load_examples(os.path.join(run, "heldout.jsonl"))[:args.questions]
        if [e.question for e in a_examples] != [e.question for e in examples]:
            raise ValueError(f"--attempts {run}: its heldout.jsonl holds other questions than --run {args.run}'s; "
                             "give two arms of one bench seed (they share the held-out set)")
        initial, initial_tokens = attempts_of(cfg, a_model, a_tok, examples, task, seed=args.seed)
    c = probe(cfg, model, tok, examples, task, seed=args.seed, initial=initial, initial_tokens=initial_tokens)
    print(f"| model | round 0 | round 1 | wrong re-solved: fixed / fresh sample right | wrong not re-solved | "
          f"right re-solved: stayed right | right kept | well-formed |\n|---|---|---|---|---|---|---|---|\n"
          f"| {args.model}{f' + {args.repair_steps} repair steps' if args.repair_steps else ''} | "
          f"{c['round0']:.3f} | {c['round1']:.3f} | {c['wrong_redone']}: {c['fixed']} / {c['fresh_fixed']} | "
          f"{c['wrong_kept']} | {c['right_redone']}: {c['right_stayed']} | {c['right_kept']} | "
          f"{c['well_formed']:.3f} |")
    if "checks" in c:
        print("\nThe critic's worked check against the task's, by attempt and verdict (exact / first fault: lines, "
              "copy, mark):\n\n| attempt | " + " | ".join(c["checks"]) + " |\n|---|" + "---|" * len(c["checks"]))
        print("| " + (args.attempts or args.run) + " | " + " | ".join(
            " / ".join(str(v[k]) for k in CHECK_OUTCOMES) for v in c["checks"].values()) + " |")
    return c


if __name__ == "__main__":
    main()
