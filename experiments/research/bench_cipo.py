"""CIPO against GRPO from the same warm-up: does training on corrections of its own attempts pay off?

    python experiments/research/bench_cipo.py --config jaxrl_reason/configs/testbed_latin_cipo.py \
        [--workdir runs/bench_cipo] [--seeds 0,1,2] [--rl-steps 0] [--questions 256] [--n 8] [--rounds 2]

For each seed, two runs share the tokenizer and the warm-up (`bench_rlv.share_warmup`: the GRPO arm makes it; the
testbed config's warm-up teaches the correction prompt through `sft.aux_correct_share`):
  grpo  the config with its method forced to plain GRPO (`bench_rlv.as_plain_grpo`), same RL steps
  cipo  the config as given (CIPO: the GRPO stream plus corrections of this step's own attempts)
Then, per arm, on the first `--questions` held-out questions: N samples each at the training temperature for
pass@1 (`inference.test_time.evaluate`), and `--rounds` rounds of test-time correction of the model's own greedy
attempt (`inference.correction.evaluate_correction`, greedy, every attempt corrected whether right or not): the
share of wrong attempts fixed and of right ones broken, with tokens. CIPO's replay ratio rho per step is read from
its metrics and plotted (`rho.png`).

The issue's checks, per seed and as the median over seeds:
  1. CIPO fixes a larger share of its own wrong attempts than GRPO (round 1)
  2. CIPO breaks no larger share of its right attempts than GRPO (round 1)
  3. CIPO pass@1 >= GRPO pass@1 - 2 points
Beside them, per arm, the resample reference (`resample_reference`): the share of the wrong greedy attempts that a
fresh sample at the training temperature gets right, and of the right ones it gets wrong -- what a "correction"
that ignored the attempt would score; a fix rate below it means the correction is anchored on the wrong attempt.
Per seed, CIPO minus GRPO on the round-1 fix and break rates and accuracy, each with a 95% interval over the
questions resampled (`paired`; both arms answer the same held-out questions), and their mean over the seeds, every
seed's questions resampled (`pooled`: the evaluation's noise, not the training seeds').
Writes summary.json, summary.md and rho.png to the workdir; a finished run or evaluation is reused.
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

ARMS = ("grpo", "cipo")
PAIRED = ("fix", "break", "acc")  # round 1, compared per question


def resample_reference(attempt_correct, sample_correct) -> dict:
    """What ignoring the attempt would give: a fresh sample at the training temperature in place of a correction.
    attempt_correct [Q] (the greedy attempt), sample_correct [Q, N] (N samples of the same question). Returns
    "fix": mean over questions with a wrong attempt of their sample accuracy, "break": mean over questions with a
    right attempt of their sample error rate (nan when there is no such question). A correction that fixes less
    than "fix" is anchored on the wrong attempt; one that breaks more than "break" does worse than re-solving."""
    a = np.asarray(attempt_correct, bool)
    acc = np.asarray(sample_correct, np.float64).mean(axis=1)
    if acc.shape != a.shape:
        raise ValueError(f"resample_reference: {a.shape[0]} attempts for {acc.shape[0]} questions of samples")
    mean = lambda x: float(x.mean()) if x.size else float("nan")  # noqa: E731
    return {"fix": mean(acc[~a]), "break": mean(1.0 - acc[a])}


def evaluate_arm(cfg, *, questions: int, n: int, rounds: int, answer_instruction: str, progress: bool,
                 correction_tokens: int = 0) -> dict:
    """pass@1 from N samples per question, `rounds` rounds of correcting the model's own greedy attempt, and the
    resample reference of those attempts (`resample_reference`, from the same N samples)."""
    from jaxrl_reason.inference.correction import evaluate_correction
    from jaxrl_reason.inference.test_time import evaluate

    key = {"questions": questions, "n": n, "rounds": rounds, "rl_steps": cfg.rl.steps, "resample": True}
    fmt = cfg.data.correction_format
    if fmt != "solution":  # keeps the cache keys of earlier evaluations
        key.update(correction_format=fmt, correction_tokens=correction_tokens)
    cached = cached_eval(cfg, key)
    if cached is not None:
        return cached
    model, tok, examples, task = load_arm(cfg, questions)
    pool = evaluate(model, tok, examples, n=n, max_new_tokens=cfg.rl.max_new_tokens, temperature=cfg.rl.temperature,
                    seed=cfg.seed, reward_fn=task.reward_fn, progress=progress)
    correction = evaluate_correction(model, tok, examples, rounds=rounds, reward_fn=task.reward_fn,
                                     prompt_fn=task.prompt_fn, answer_instruction=answer_instruction,
                                     max_new_tokens=cfg.rl.max_new_tokens, seed=cfg.seed, correction_format=fmt,
                                     correction_max_new_tokens=correction_tokens or None)
    resample = resample_reference(correction["correct"][0], [r["correct"] for r in pool["samples"]])
    return save_eval(cfg, {"key": key, "pass1": pool["sample_accuracy"], "correction": correction,
                           "resample": resample, "train_tokens": token_curve(cfg.workdir)["total_tokens"]})


def checks(grpo: dict, cipo: dict) -> dict:
    g, c = grpo["correction"], cipo["correction"]
    fix, brk = "correct/round1/fix_rate", "correct/round1/break_rate"
    nan0 = lambda x: 0.0 if x != x else x  # noqa: E731  no attempt of that kind: nothing fixed or broken
    return {"cipo_fix": nan0(c[fix]), "grpo_fix": nan0(g[fix]), "fixes_more": nan0(c[fix]) > nan0(g[fix]),
            "cipo_break": nan0(c[brk]), "grpo_break": nan0(g[brk]), "breaks_no_more": nan0(c[brk]) <= nan0(g[brk]),
            "cipo_pass1": cipo["pass1"], "grpo_pass1": grpo["pass1"],
            "pass1_within_2": cipo["pass1"] >= grpo["pass1"] - 0.02,
            # not one of the checks: a fresh sample's chance on the same wrong attempts (anchoring)
            "cipo_resample_fix": nan0(cipo["resample"]["fix"]), "grpo_resample_fix": nan0(grpo["resample"]["fix"])}


def round1_scores(correct: np.ndarray, idx: np.ndarray) -> tuple[float, float, float]:
    """Round 1's fix rate, break rate and accuracy of the questions `idx` from an arm's correct [rounds + 1, Q]."""
    rate = lambda mask, val: float(val[mask].mean()) if mask.any() else float("nan")  # noqa: E731
    before, after = correct[0, idx], correct[1, idx]
    return rate(~before, after), rate(before, ~after), float(after.mean())


def correction_pair(grpo: dict, cipo: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """(GRPO's, CIPO's per-question correctness [rounds + 1, Q], Q) of one seed's two evaluations."""
    g, c = (np.asarray(e["correction"]["correct"], bool) for e in (grpo, cipo))
    if c.shape[1] != g.shape[1]:
        raise ValueError(f"paired: the arms were evaluated on {g.shape[1]} and {c.shape[1]} questions")
    return g, c, g.shape[1]


def paired(grpo: dict, cipo: dict, *, draws: int = 2000, seed: int = 0) -> dict:
    """CIPO minus GRPO on checks 1 and 2 (round-1 "fix" and "break" rates of each arm's own greedy attempts) and
    on round-1 accuracy ("acc"), with 95% intervals (`against_grpo.paired_differences`)."""
    return paired_differences(round1_scores, *correction_pair(grpo, cipo), names=PAIRED, draws=draws, seed=seed)


def pooled(evals_by_seed: dict, *, draws: int = 2000) -> dict:
    """`paired` as the mean over seeds, every seed's questions resampled in each draw
    (`against_grpo.pooled_paired_differences`)."""
    pairs = [correction_pair(e["grpo"], e["cipo"]) for e in evals_by_seed.values()]
    return pooled_paired_differences(round1_scores, pairs, names=PAIRED, draws=draws)


def rho_plot(run_dirs: dict, path: str) -> None:
    """CIPO's replay ratio rho against the step, one curve per seed."""
    from jaxrl_reason.experiment.plots import training_curves

    fig = None
    for seed, d in run_dirs.items():
        fig = training_curves(os.path.join(d, "logs", "metrics.jsonl"), ["cipo/rho", "cipo/retention_window"],
                              ax=None if fig is None else fig.axes, label=f"seed {seed}")
    if fig is not None:
        fig.savefig(path, dpi=110)


def main(argv=None):
    args, overrides, base = parse_bench_args(__doc__, "cipo", argv, n_help="samples per question for pass@1",
                                             rounds_help="test-time correction rounds")
    # Both arms correct with the CIPO run's answer format at test time (the GRPO arm's method knobs are dropped).
    answer_instruction = str(base.method.extra.answer_instruction)
    # and with its correction budget (0 = the solve budget, rl.max_new_tokens)
    correction_tokens = int(base.method.extra.correction_max_new_tokens)

    from absl import logging
    logging.set_verbosity(logging.WARNING)

    t0 = time.time()
    root = os.path.abspath(args.workdir)
    per_seed, cipo_dirs = {}, {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        # both arms keep the configured warm-up, correction rows included
        cfgs = train_arms(args.config, root, seed, "cipo", rl_steps=args.rl_steps, progress=not args.no_progress,
                          overrides=overrides)
        cipo_dirs[seed] = cfgs["cipo"].workdir
        evals = {}
        for arm, cfg in cfgs.items():
            print(f"== seed {seed} {arm}: evaluating", flush=True)
            evals[arm] = evaluate_arm(cfg, questions=args.questions, n=args.n, rounds=args.rounds,
                                      answer_instruction=answer_instruction, progress=not args.no_progress,
                                      correction_tokens=correction_tokens)
        per_seed[seed] = {"evals": evals, "checks": checks(evals["grpo"], evals["cipo"]),
                          "paired": paired(evals["grpo"], evals["cipo"], seed=seed)}

    lines = ["| seed | arm | pass@1 | greedy attempt acc | "
             + " | ".join(f"round {t}: acc / fixed / broken / tokens" for t in range(1, args.rounds + 1))
             + " | resample: fixed / broken | train tokens (M) |",
             "|---|---|---|---|" + "---|" * args.rounds + "---|---|"]
    for seed, res in per_seed.items():
        for arm in ARMS:
            e, c = res["evals"][arm], res["evals"][arm]["correction"]
            lines.append(f"| {seed} | {arm} | {e['pass1']:.3f} | {c['correct/round0/accuracy']:.3f} | " + " | ".join(
                f"{c[f'correct/round{t}/accuracy']:.3f} / {c[f'correct/round{t}/fix_rate']:.3f} / "
                f"{c[f'correct/round{t}/break_rate']:.3f} / {c[f'correct/round{t}/tokens_per_example']:.0f}"
                for t in range(1, args.rounds + 1))
                + f" | {e['resample']['fix']:.3f} / {e['resample']['break']:.3f} | {e['train_tokens'] / 1e6:.2f} |")
    lines += ["", "CIPO minus GRPO per seed (round 1, points), 95% intervals over the questions resampled:", ""]
    lines += [interval_line(f"seed {seed}", res["paired"], PAIRED, (100,) * len(PAIRED))
              for seed, res in per_seed.items()]
    mean = pooled({seed: res["evals"] for seed, res in per_seed.items()})
    if len(per_seed) > 1:  # the questions' noise only: the seeds are the training noise's units
        lines.append(interval_line(f"mean over the {len(per_seed)} seeds", mean, PAIRED, (100,) * len(PAIRED)))
    keys = ("cipo_fix", "grpo_fix", "cipo_break", "grpo_break", "cipo_pass1", "grpo_pass1", "cipo_resample_fix",
            "grpo_resample_fix")
    med = {k: float(np.median([r["checks"][k] for r in per_seed.values()])) for k in keys}
    lines += ["", "Medians over seeds: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()), "",
              f"1. CIPO fixes more of its wrong attempts than GRPO: {med['cipo_fix'] > med['grpo_fix']}",
              f"2. CIPO breaks no more of its right attempts: {med['cipo_break'] <= med['grpo_break']}",
              f"3. CIPO pass@1 >= GRPO's - 2 points: {med['cipo_pass1'] >= med['grpo_pass1'] - 0.02}"]
    table = "\n".join(lines)
    print("\n" + table)
    rho_plot(cipo_dirs, os.path.join(root, "rho.png"))
    json.dump({"per_seed": per_seed, "mean_over_seeds": mean, "medians": med,
               "args": {**vars(args), "overrides": list(overrides)}, "seconds": time.time() - t0},
              open(os.path.join(root, "summary.json"), "w"), indent=2)
    open(os.path.join(root, "summary.md"), "w").write(table + "\n")
    return per_seed


if __name__ == "__main__":
    main()
