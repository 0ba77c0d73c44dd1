"""How far plain GRPO moves a warm-up, over a grid of RL knobs. Each grid point is a GRPO run (the config with its
method replaced by plain GRPO, its warm-up kept) from the same tokenizer and SFT model -- `--from`, a run directory
holding both, or without it the warm-up the first point trains -- scored on the same held-out questions: greedy
accuracy before and after, pass@1 from N samples at the RL temperature, beside what its training metrics say
(reward and per-token entropy over the first and last fifth of the steps).

    python experiments/research/rl_headroom.py --config jaxrl_reason/configs/testbed_latin_cure.py \
        --from runs/bench_cure/seed0/grpo --workdir runs/rl_headroom --grid rl.lr=2e-5,1e-4,3e-4 \
        --config.rl.steps=200

`--grid KNOB=V1,V2,...` may repeat (every combination runs); only `rl.*` and `method.*` knobs may vary, since the
warm-up is shared. A finished point is reused. The question it answers is whether a method's benchmark at a given
RL budget can show anything: if no point moves the policy, no method built on the same update will either.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

import numpy as np  # noqa: E402

from against_grpo import cached_eval, config_overrides, load_arm, save_eval  # noqa: E402
from bench_rlv import as_plain_grpo, share_warmup, trained  # noqa: E402
from jaxrl_reason.configs import load_config_file  # noqa: E402


def parse_grid(specs) -> list:
    """[(knob, [values as written])] from `KNOB=V1,V2,...` strings; a knob is `section.name` in a section that
    acts after the warm-up (rl, method)."""
    grid = []
    for spec in specs:
        knob, sep, values = spec.partition("=")
        if not sep or "." not in knob or not values:
            raise ValueError(f"--grid {spec!r}: write it as SECTION.KNOB=V1,V2,... (e.g. rl.lr=2e-5,1e-4)")
        if knob.split(".")[0] not in ("rl", "method"):
            raise ValueError(f"--grid {knob}: every point shares one warm-up, so only rl.* and method.* knobs can "
                             "vary; set the others once with --config.SECTION.KNOB=VALUE")
        if knob in (k for k, _ in grid):
            raise ValueError(f"--grid names {knob} twice; give all its values in one --grid")
        grid.append((knob, values.split(",")))
    return grid


def point_name(point) -> str:
    return "_".join(f"{knob.split('.')[-1]}{value}" for knob, value in point)


def phase_means(run_dir: str, keys=("reward/mean", "solve/entropy")) -> dict:
    """{key: [mean over the first fifth of the steps, over the last fifth]} from the run's metrics JSONL."""
    from jaxrl_reason.experiment.plots import read_records

    records = sorted((r for r in read_records(os.path.join(run_dir, "logs", "metrics.jsonl")) if "reward/mean" in r),
                     key=lambda r: r["step"])
    fifth = max(1, len(records) // 5)
    return {key: [float(np.mean([r[key] for r in part if key in r])) for part in (records[:fifth], records[-fifth:])]
            for key in keys}


def score(cfg, model: str, tokenizer: str, *, questions: int, n: int) -> float:
    """pass@1 of the run's `model` subdirectory (with `tokenizer`'s) from `n` samples on its first `questions`
    held-out questions, cached beside the run as pass1_<model>.json under the same key."""
    from jaxrl_reason.inference.test_time import evaluate

    key = {"questions": questions, "n": n, "rl_steps": cfg.rl.steps, "temperature": cfg.rl.temperature,
           "seed": cfg.seed}
    cached = cached_eval(cfg, key, f"pass1_{model}.json")
    if cached is not None:
        return cached["pass1"]
    policy, tok, examples, task = load_arm(cfg, questions, model, tokenizer)
    pool = evaluate(policy, tok, examples, n=n, max_new_tokens=cfg.rl.max_new_tokens, temperature=cfg.rl.temperature,
                    seed=cfg.seed, reward_fn=task.reward_fn, progress=cfg.rl.progress, keep_samples=False)
    return save_eval(cfg, {"key": key, "pass1": float(pool["sample_accuracy"])}, f"pass1_{model}.json")["pass1"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--from", dest="source",
                   help="a run directory with the tokenizer/ and sft_model/ every point starts from (default: the "
                        "first point trains the config's warm-up)")
    p.add_argument("--workdir", required=True)
    p.add_argument("--grid", action="append", required=True, help="SECTION.KNOB=V1,V2,... (repeatable)")
    p.add_argument("--questions", type=int, default=256)
    p.add_argument("--n", type=int, default=8, help="samples per question for pass@1")
    p.add_argument("--no-progress", action="store_true")
    args, overrides = config_overrides(p, argv)
    for name in ("tokenizer", "sft_model", "results.json") if args.source else ():
        if not os.path.exists(os.path.join(args.source, name)):
            p.error(f"--from {args.source} has no {name}: give a finished run's directory")
    try:
        grid = parse_grid(args.grid)
    except ValueError as e:
        p.error(str(e))

    rows, source = [], args.source
    for point in itertools.product(*[[(knob, v) for v in values] for knob, values in grid]):
        cfg = load_config_file(args.config, overrides + tuple(f"--config.{k}={v}" for k, v in point))
        as_plain_grpo(cfg, verify_warmup=True)
        cfg.workdir = os.path.join(args.workdir, point_name(point))
        cfg.rl.progress = not args.no_progress
        if source:
            share_warmup(source, cfg.workdir)
        if not trained(cfg):
            from jaxrl_reason.experiment.pipeline import run

            print(f"== {point_name(point)}: {cfg.rl.steps} GRPO steps in {cfg.workdir}", flush=True)
            run(cfg)
        source = source or cfg.workdir
        results = json.load(open(os.path.join(cfg.workdir, "results.json")))
        # every point starts from the same warm-up: it is scored once, in the first point's directory
        before = rows[0]["before_pass1"] if rows else score(cfg, "sft_model", "tokenizer", questions=args.questions,
                                                             n=args.n)
        after = score(cfg, "final", "final", questions=args.questions, n=args.n)
        rows.append({"point": dict(point), "before_greedy": results["before"]["accuracy"],
                     "after_greedy": results["after"]["accuracy"], "before_pass1": before, "after_pass1": after,
                     "train": phase_means(cfg.workdir), "rl_seconds": results.get("rl_seconds"),
                     "workdir": cfg.workdir})

    knobs = [k for k, _ in grid]
    lines = [f"GRPO from `{args.source or rows[0]['workdir']}`, {args.questions} held-out questions, pass@1 from "
             f"{args.n} samples", "",
             "| " + " | ".join(knobs) + " | greedy before -> after | pass@1 before -> after | train reward first -> "
             "last fifth | entropy first -> last fifth (nats/token) | RL s |",
             "|" + "---|" * (len(knobs) + 5)]
    for r in rows:
        t = r["train"]
        lines.append("| " + " | ".join(str(r["point"][k]) for k in knobs)
                     + f" | {r['before_greedy']:.3f} -> {r['after_greedy']:.3f} | {r['before_pass1']:.3f} -> "
                     f"{r['after_pass1']:.3f} | {t['reward/mean'][0]:.3f} -> {t['reward/mean'][1]:.3f} | "
                     f"{t['solve/entropy'][0]:.3f} -> {t['solve/entropy'][1]:.3f} | {r['rl_seconds'] or 0:.0f} |")
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.workdir, exist_ok=True)
    json.dump(rows, open(os.path.join(args.workdir, "summary.json"), "w"), indent=2)
    open(os.path.join(args.workdir, "summary.md"), "w").write(table + "\n")


if __name__ == "__main__":
    main()
