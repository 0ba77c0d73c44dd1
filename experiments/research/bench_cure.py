"""CURE against GRPO from the same warm-up: does training to critique and re-solve pay off at test time?

    python experiments/research/bench_cure.py --config jaxrl_reason/configs/cure.py [--workdir runs/bench_cure] \
        [--seeds 0,1,2] [--rl-steps 0] [--questions 256] [--n 8] [--rounds 2]

For each seed, two runs share the tokenizer and the warm-up (`bench_rlv.share_warmup`: the GRPO arm makes it; a
testbed config's warm-up teaches the critique format through `sft.aux_critique_share`):
  grpo  the config with its method forced to plain GRPO (`bench_rlv.as_plain_grpo`), same RL steps
  cure  the config as given (CURE: solve, critique with a forced verdict, hint-guided re-solve, replay)
Then, per arm, on the first `--questions` held-out questions: N samples each at the training temperature
(`inference.test_time.evaluate`: pass@1, maj@k), and `--rounds` rounds of test-time self-refinement from each
question's first sample (`inference.strategies.evaluate_refinement`, verdict generated, not forced) with majority
voting at the same generated tokens beside it. Tokens generated in training are read from each run's metrics
(rollouts plus CURE's critiques and guided solutions, `generate/extra_tokens`).

The issue's checks, per seed and as the median over seeds:
  1. CURE's round 0 -> 1 refinement gain > 0 and > GRPO's
  2. CURE's verdict F1 (round 1, wrong = positive, an unparsed verdict scored as the wrong call) > GRPO's
  3. >= 90% of CURE's round-1 critiques well-formed
  4. CURE pass@1 >= GRPO pass@1 - 2 points
Beside checks 1 and 2, per seed, the CURE-minus-GRPO difference with a 95% interval over the questions resampled
(`paired`; both arms answer the same held-out questions), and per arm what round 1's guided re-solves are worth
against re-sampling (`resample_reference`: the share of the sent-back wrong attempts a re-solve fixed beside the
accuracy of fresh unguided samples of the same questions, the pool's others). Writes summary.json and summary.md to the
workdir; a finished run or evaluation is reused (one saved before the per-example records has no interval: delete
its bench_eval.json to re-evaluate).
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

import numpy as np  # noqa: E402

from against_grpo import (cached_eval, interval_line, load_arm, paired_differences, parse_bench_args,  # noqa: E402
                          pooled_paired_differences, save_eval, train_arms)
from bench_credit import token_curve  # noqa: E402

ARMS = ("grpo", "cure")
PAIRED = ("gain", "f1")  # checks 1 and 2, compared per question


def evaluate_arm(cfg, *, questions: int, n: int, rounds: int, critique_tokens: int, progress: bool,
                 guided_layout: str = "after", critique_format: str = "fields") -> dict:
    """pass@1 / maj@k from N samples per question and self-refinement from each question's first sample."""
    from jaxrl_reason.inference.strategies import evaluate_refinement
    from jaxrl_reason.inference.test_time import evaluate

    key = {"questions": questions, "n": n, "rounds": rounds, "rl_steps": cfg.rl.steps,
           "critique_tokens": critique_tokens, "guided_layout": guided_layout, "resample": True}
    if critique_format != "fields":  # keeps the cache keys of earlier evaluations
        key["critique_format"] = critique_format
    cached = cached_eval(cfg, key)
    if cached is not None:
        return cached
    model, tok, examples, task = load_arm(cfg, questions)
    reward = task.reward_fn
    pool = evaluate(model, tok, examples, n=n, max_new_tokens=cfg.rl.max_new_tokens, temperature=cfg.rl.temperature,
                    seed=cfg.seed, reward_fn=reward, progress=progress)
    samples = pool.pop("samples")
    refine = evaluate_refinement(
        model, tok, examples, reward, rounds=rounds, max_new_tokens=cfg.rl.max_new_tokens,
        critique_max_new_tokens=critique_tokens, initial=[s["completions"][0] for s in samples],
        initial_tokens=[s["lengths"][0] for s in samples], pool_classes=[s["classes"] for s in samples],
        pool_correct=[s["correct"] for s in samples], tokens_per_sample=pool["mean_completion_tokens"],
        temperature=cfg.rl.temperature, seed=cfg.seed, guided_layout=guided_layout, critique_format=critique_format)
    refine.pop("critiques")
    pool_correct = [[bool(c) for c in s["correct"]] for s in samples]
    return save_eval(cfg, {"key": key, "pass1": pool["sample_accuracy"], "majority": pool["strategies"]["majority"],
                           "ks": pool["ks"], "refinement": refine, "pool_correct": pool_correct,
                           "resample": resample_reference(refine, pool_correct),
                           "train_tokens": token_curve(cfg.workdir)["total_tokens"]})


def resample_reference(refinement: dict, pool_correct) -> dict:
    """What round 1's re-solves are worth against re-sampling. Over the questions whose first attempt (the pool's
    sample 0, refinement's round 0) round 1 sent back: "fix", the share of the wrong ones a guided re-solve got
    right, beside "resample_fix", the mean accuracy of the pool's other samples of the same questions -- fresh,
    unguided samples of the same model and temperature; "keep" / "resample_keep" the same over the right ones.
    A hint that carries nothing beyond the error's existence leaves fix ~ resample_fix. nan where no question
    qualifies; "redone_wrong" / "redone_right" count them."""
    from jaxrl_reason.inference.refine import VERDICT_NO_ERROR, RefineResult

    r = RefineResult.from_per_example(refinement["per_example"])
    pool = np.asarray(pool_correct, bool)
    first = r.correct[0]
    if pool.ndim != 2 or pool.shape[0] != first.shape[0] or pool.shape[1] < 2:
        raise ValueError(f"resample_reference: pool_correct must be [{first.shape[0]} questions, >= 2 samples], "
                         f"got shape {pool.shape}")
    if not np.array_equal(pool[:, 0], first):
        raise ValueError("resample_reference: the pool's first samples are not refinement's round 0 (give the pool "
                         "the refinement started from)")
    redo = r.verdicts[0] != VERDICT_NO_ERROR  # an unparsed verdict is re-solved too
    fresh = pool[:, 1:].mean(axis=1)
    mean = lambda x: float(np.mean(x)) if np.size(x) else float("nan")  # noqa: E731
    wrong, right = redo & ~first, redo & first
    return {"redone_wrong": int(wrong.sum()), "fix": mean(r.correct[1][wrong]), "resample_fix": mean(fresh[wrong]),
            "redone_right": int(right.sum()), "keep": mean(r.correct[1][right]), "resample_keep": mean(fresh[right])}


def critique_budget(cfg) -> int:
    """The test-time critique budget: the CURE run's, plus data.check_tokens when the critic writes the check."""
    return int(cfg.method.extra.critique_max_new_tokens) + (
        int(cfg.data.check_tokens) if cfg.data.critique_format == "worked_check" else 0)


def checks(grpo: dict, cure: dict) -> dict:
    g, c = grpo["refinement"]["rows"], cure["refinement"]["rows"]
    gain = lambda rows: rows[1]["acc"] - rows[0]["acc"]  # noqa: E731
    return {"cure_gain": gain(c), "grpo_gain": gain(g),
            "gain_positive_and_larger": gain(c) > 0 and gain(c) > gain(g),
            # strict F1: an unparsed verdict is the wrong call, so a critic that writes none cannot win on base rate
            "cure_f1": c[1]["verdict_f1_strict"], "grpo_f1": g[1]["verdict_f1_strict"],
            "f1_higher": c[1]["verdict_f1_strict"] > g[1]["verdict_f1_strict"], "cure_well_formed": c[1]["well_formed"],
            "well_formed_90": c[1]["well_formed"] >= 0.9,
            "cure_pass1": cure["pass1"], "grpo_pass1": grpo["pass1"],
            "pass1_within_2": cure["pass1"] >= grpo["pass1"] - 0.02}


def resample_cells(e: dict) -> str:
    """The summary's two re-solve cells of an arm's evaluation ("-" for one saved before the reference)."""
    r = e.get("resample")
    if r is None:
        return "- | -"
    return (f"{r['redone_wrong']}: {r['fix']:.3f} / {r['resample_fix']:.3f} | "
            f"{r['redone_right']}: {r['keep']:.3f} / {r['resample_keep']:.3f}")


def refine_pair(grpo: dict, cure: dict):
    """(GRPO's, CURE's RefineResult, questions) of one seed's two evaluations; None for an evaluation saved before
    the per-example records."""
    from jaxrl_reason.inference.refine import RefineResult

    if any("per_example" not in e["refinement"] for e in (grpo, cure)):
        return None
    g, c = (RefineResult.from_per_example(e["refinement"]["per_example"]) for e in (grpo, cure))
    if c.correct.shape[1] != g.correct.shape[1]:
        raise ValueError(f"paired: the arms were evaluated on {g.correct.shape[1]} and {c.correct.shape[1]} questions")
    return g, c, g.correct.shape[1]


def refine_scores(r, idx) -> tuple[float, float]:
    """The questions `idx`'s refinement gain (round 0 -> 1 accuracy) and round-1 strict verdict F1."""
    r = r.take(idx)
    return r.accuracy[1] - r.accuracy[0], r.verdict_metrics(1, strict=True)["f1"]


def paired(grpo: dict, cure: dict, *, draws: int = 2000, seed: int = 0) -> dict | None:
    """CURE minus GRPO on check 1 ("gain": round 0 -> 1 accuracy) and check 2 ("f1": round-1 strict verdict F1)
    with 95% intervals (`against_grpo.paired_differences`); None for an evaluation saved before the per-example
    records."""
    pair = refine_pair(grpo, cure)
    return None if pair is None else paired_differences(refine_scores, *pair, names=PAIRED, draws=draws, seed=seed)


def pooled(evals_by_seed: dict, *, draws: int = 2000) -> dict | None:
    """`paired` as the mean over seeds, every seed's questions resampled in each draw
    (`against_grpo.pooled_paired_differences`); None when a seed's evaluation lacks the per-example records."""
    pairs = [refine_pair(e["grpo"], e["cure"]) for e in evals_by_seed.values()]
    if any(p is None for p in pairs):
        return None
    return pooled_paired_differences(refine_scores, pairs, names=PAIRED, draws=draws)


def main(argv=None):
    args, overrides, base = parse_bench_args(
        __doc__, "cure", argv, n_help="samples per question for pass@1 and majority voting",
        rounds_help="self-refinement rounds")
    # Both arms critique and re-solve with the CURE run's budget, guided layout and critique format at test time
    # (the GRPO arm's method knobs are dropped). The training budget counts what follows the forced start; with a
    # worked check the critic writes the check itself at test time, so its budget (data.check_tokens) is added.
    critique_format = str(base.data.critique_format)
    critique_tokens = critique_budget(base)
    guided_layout = str(base.data.guided_layout)

    from absl import logging
    logging.set_verbosity(logging.WARNING)

    t0 = time.time()
    root = os.path.abspath(args.workdir)
    per_seed = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        cfgs = train_arms(args.config, root, seed, "cure", rl_steps=args.rl_steps, progress=not args.no_progress,
                          overrides=overrides)
        evals = {}
        for arm, cfg in cfgs.items():
            print(f"== seed {seed} {arm}: evaluating", flush=True)
            evals[arm] = evaluate_arm(cfg, questions=args.questions, n=args.n, rounds=args.rounds,
                                      critique_tokens=critique_tokens, progress=not args.no_progress,
                                      critique_format=critique_format,
                                      guided_layout=guided_layout)
        per_seed[seed] = {"evals": evals, "checks": checks(evals["grpo"], evals["cure"]),
                          "paired": paired(evals["grpo"], evals["cure"], seed=seed)}

    lines = ["| seed | arm | pass@1 | " + " | ".join(f"round {t} acc / tokens" for t in range(args.rounds + 1))
             + " | maj at round-1 tokens | strict verdict F1 (round 1) | well-formed | train tokens (M) "
             "| round-1 re-solves of wrong: fixed / fresh sample | of right: kept / fresh sample |",
             "|---|---|---|" + "---|" * (args.rounds + 1) + "---|---|---|---|---|---|"]
    for seed, res in per_seed.items():
        for arm in ARMS:
            e = res["evals"][arm]
            rows = e["refinement"]["rows"]
            lines.append(f"| {seed} | {arm} | {e['pass1']:.3f} | "
                         + " | ".join(f"{r['acc']:.3f} / {r['tokens']:.0f}" for r in rows)
                         + f" | {rows[1]['majority_same_tokens']:.3f} | {rows[1]['verdict_f1_strict']:.3f} | "
                         f"{rows[1]['well_formed']:.3f} | {e['train_tokens'] / 1e6:.2f} | {resample_cells(e)} |")
    intervals = [interval_line(f"seed {seed}", res["paired"], PAIRED, (100, 1))
                 for seed, res in per_seed.items() if res["paired"]]
    mean = pooled({seed: res["evals"] for seed, res in per_seed.items()})
    if mean is not None and len(per_seed) > 1:  # the questions' noise only: the seeds are the training noise's units
        intervals.append(interval_line(f"mean over the {len(per_seed)} seeds", mean, PAIRED, (100, 1)))
    if intervals:
        lines += ["", "CURE minus GRPO per seed (gain in points, strict verdict F1), 95% intervals over the questions "
                  "resampled:", ""] + intervals
    keys = ("cure_gain", "grpo_gain", "cure_f1", "grpo_f1", "cure_well_formed", "cure_pass1", "grpo_pass1")
    med = {k: float(np.median([r["checks"][k] for r in per_seed.values()])) for k in keys}
    lines += ["", "Medians over seeds: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()), "",
              f"1. CURE gain > 0 and > GRPO's: {med['cure_gain'] > 0 and med['cure_gain'] > med['grpo_gain']}",
              f"2. CURE verdict F1 > GRPO's: {med['cure_f1'] > med['grpo_f1']}",
              f"3. CURE critiques >= 90% well-formed: {med['cure_well_formed'] >= 0.9}",
              f"4. CURE pass@1 >= GRPO's - 2 points: {med['cure_pass1'] >= med['grpo_pass1'] - 0.02}"]
    table = "\n".join(lines)
    print("\n" + table)
    json.dump({"per_seed": per_seed, "mean_over_seeds": mean, "medians": med,
               "args": {**vars(args), "overrides": list(overrides)}, "seconds": time.time() - t0},
              open(os.path.join(root, "summary.json"), "w"), indent=2)
    open(os.path.join(root, "summary.md"), "w").write(table + "\n")
    return per_seed


if __name__ == "__main__":
    main()
