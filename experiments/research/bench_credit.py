"""Credit assignment under one token budget: GRPO, RLOO, VinePPO and PPO on the CPU default task.

    python experiments/research/bench_credit.py [--workdir runs/bench_credit] [--seeds 0,1,2] \
        [--arms grpo,rloo,vineppo,ppo] [--steps 200] [--vine-steps 25] [--evals 8]

For each seed, every arm starts from the same tokenizer and SFT warm-up (the first arm's; `bench_rlv.share_warmup`)
and trains with its preset (`configs/<arm>.py`, all built on `tiny_default`): `--steps` RL steps, VinePPO
`--vine-steps` (its Monte-Carlo continuations cost several times a step's own rollouts). Held-out greedy accuracy
is measured `--evals` times per run (`rl.eval_every`). The budget is generated tokens: every rollout token plus
VinePPO's continuation tokens (`vine/extra_tokens`); PPO's value is a forward pass, not generation. The table
compares the arms at the largest budget every run reached (each run's accuracy curve interpolated there); the
plot is held-out accuracy against tokens, mean over seeds +- one standard error (`plots.budget_curves`).
A finished run is reused (only its metrics are read), so an interrupted benchmark resumes.
Writes summary.json, summary.md and accuracy_vs_tokens.png to the workdir.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

import numpy as np  # noqa: E402

from bench_rlv import share_warmup, trained  # noqa: E402
from jaxrl_reason.configs import PRESET_DIR, load_config_file

CONFIGS = PRESET_DIR
LABELS = {"grpo": "GRPO", "rloo": "RLOO", "vineppo": "VinePPO", "ppo": "PPO (learned value)"}


def token_curve(run_dir: str) -> dict:
    """{"x": cumulative generated tokens at 0 and at each held-out evaluation, "y": accuracy there, "steps",
    "total_tokens"} from a finished run's metrics JSONL and results.json (the accuracy before RL at 0 tokens)."""
    from jaxrl_reason.experiment.plots import read_records

    records = read_records(os.path.join(run_dir, "logs", "metrics.jsonl"))
    cfg = json.load(open(os.path.join(run_dir, "results.json")))
    rows = cfg["rollouts_per_step"]
    spent, xs, ys, steps = 0.0, [0.0], [cfg["before"]["accuracy"]], 0
    for r in sorted(records, key=lambda r: r["step"]):
        if "length/mean" in r:
            spent += r["length/mean"] * rows + r.get("vine/extra_tokens", 0.0) + r.get("generate/extra_tokens", 0.0)
            steps = max(steps, int(r["step"]))
        if "eval/accuracy" in r:
            xs.append(spent)
            ys.append(r["eval/accuracy"])
    if "after" in cfg and xs[-1] < spent:
        xs.append(spent)
        ys.append(cfg["after"]["accuracy"])
    return {"x": xs, "y": ys, "steps": steps, "total_tokens": spent}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="runs/bench_credit")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default="grpo,rloo,vineppo,ppo")
    ap.add_argument("--steps", type=int, default=200, help="RL steps of every arm but VinePPO")
    ap.add_argument("--vine-steps", type=int, default=25, help="VinePPO's RL steps")
    ap.add_argument("--evals", type=int, default=8, help="held-out evaluations per run")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if not os.path.exists(os.path.join(CONFIGS, f"{a}.py"))]
    if unknown:
        raise SystemExit(f"--arms: no preset jaxrl_reason/configs/{unknown[0]}.py")
    seeds = [int(s) for s in args.seeds.split(",")]

    from absl import logging
    logging.set_verbosity(logging.WARNING)
    from jaxrl_reason.experiment.pipeline import run
    from jaxrl_reason.experiment.plots import budget_curves, format_table

    t0 = time.time()
    root = os.path.abspath(args.workdir)
    curves = {arm: [] for arm in arms}
    for seed in seeds:
        first = None
        for arm in arms:
            cfg = load_config_file(os.path.join(CONFIGS, f"{arm}.py"))
            cfg.seed = seed
            cfg.workdir = os.path.join(root, f"seed{seed}", arm)
            cfg.rl.steps = args.vine_steps if arm == "vineppo" else args.steps
            cfg.rl.eval_every = max(1, cfg.rl.steps // args.evals)
            cfg.rl.progress = not args.no_progress
            if first is not None:
                share_warmup(first, cfg.workdir)
            if not trained(cfg):
                print(f"== seed {seed} {arm}: {cfg.rl.steps} RL steps in {cfg.workdir}", flush=True)
                run(cfg)
            results = json.load(open(os.path.join(cfg.workdir, "results.json")))
            if "rollouts_per_step" not in results:
                results["rollouts_per_step"] = cfg.rl.prompts_per_step * cfg.rl.samples_per_prompt
                json.dump(results, open(os.path.join(cfg.workdir, "results.json"), "w"), indent=2)
            first = first or cfg.workdir
            curves[arm].append(dict(token_curve(cfg.workdir), seed=seed))
    budget = min(c["total_tokens"] for runs in curves.values() for c in runs)
    rows = []
    for arm, runs in curves.items():
        at = [float(np.interp(budget, c["x"], c["y"])) for c in runs]
        final = [c["y"][-1] for c in runs]
        rows.append({"arm": LABELS.get(arm, arm), "steps": runs[0]["steps"],
                     "tokens per run (M)": float(np.mean([c["total_tokens"] for c in runs]) / 1e6),
                     f"acc at {budget / 1e6:.2f}M tokens (median)": float(np.median(at)),
                     "per seed": " / ".join(f"{a:.3f}" for a in at),
                     "acc at own end (median)": float(np.median(final)),
                     "before RL (median)": float(np.median([c["y"][0] for c in runs]))})
    table = format_table(rows, list(rows[0]))
    print("\n" + table)
    fig = budget_curves({LABELS.get(a, a): [{"x": c["x"], "y": c["y"]} for c in runs] for a, runs in curves.items()},
                        title=f"CPU default, seeds {args.seeds}", path=os.path.join(root, "accuracy_vs_tokens.png"))
    del fig
    summary = {"seeds": seeds, "budget_tokens": budget, "rows": rows, "curves": curves, "seconds": time.time() - t0,
               "args": vars(args)}
    json.dump(summary, open(os.path.join(root, "summary.json"), "w"), indent=2)
    open(os.path.join(root, "summary.md"), "w").write(table + "\n")
    print(f"\nwrote {root}/summary.md, summary.json, accuracy_vs_tokens.png ({time.time() - t0:.0f} s)")
    return summary


if __name__ == "__main__":
    main()
