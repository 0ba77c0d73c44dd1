"""On-policy distillation vs GRPO alone on CPU (docs/results/distill.md).

    python experiments/research/bench_distill.py --out runs/distill [--steps 60 --teacher-steps 200]

1. The teacher: the tiny default (jaxrl_reason/configs/tiny_default.py: SFT warm-up, then GRPO) trained for
   `--teacher-steps` RL steps, saved as an HF checkpoint (<out>/teacher/final).
2. Two students start from the teacher's own SFT checkpoint (copied, with its tokenizer, into each arm's workdir,
   so both arms and the teacher share one warm-up and one held-out split): `grpo` (the tiny default's GRPO) and
   `distill` (the same, with method.distill.teacher = the teacher: advantages + log pi_T - log pi_old per token).
   Each for `--seeds`: the RL loop's seed (data order, sampling); the data and its held-out split stay seed 0's.
3. The table: held-out accuracy every `--eval-every` steps against steps and against the completion tokens
   trained so far (the sum of `solve/tokens`), mean over seeds.
A workdir that already holds a finished run is read, not re-run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "jaxrl_reason", "configs", "tiny_default.py")


def train(workdir: str, *flags: str, rl_seed: int = 0) -> None:
    if os.path.exists(os.path.join(workdir, "final", "config.json")):
        return
    cmd = [sys.executable, os.path.abspath(__file__), "--one", workdir, "--rl-seed", str(rl_seed), *flags]
    print(" ".join(cmd), flush=True)
    with open(workdir.rstrip("/") + ".log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)


def curve(workdir: str) -> list[dict]:
    """[{step, tokens, accuracy}] from the run's metrics (eval records), step 0 = the run's 'before'."""
    before = json.load(open(os.path.join(workdir, "results.json")))["before"]["accuracy"]
    rows, tokens = [{"step": 0, "tokens": 0, "accuracy": before}], 0.0
    for line in open(os.path.join(workdir, "logs", "metrics.jsonl")):
        r = json.loads(line)
        tokens += r.get("solve/tokens", 0.0)
        if "eval/accuracy" in r:
            rows.append({"step": r["step"], "tokens": int(tokens), "accuracy": r["eval/accuracy"]})
    return rows


def one(workdir: str, rl_seed: int, flags: list[str]) -> None:
    """One pipeline run of the tiny default with `flags` (--config.x=y), its RL loop seeded by `rl_seed`."""
    import dataclasses


    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.pipeline import run
    import importlib.util

    spec = importlib.util.spec_from_file_location("cfg", CONFIG)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    cfg.workdir = workdir
    for f in flags:
        key, value = f[len("--config."):].split("=", 1)
        *path, last = key.split(".")
        node = cfg
        for p in path:
            node = node[p]
        node[last] = type(node[last])(value)
    rc = read_run_config(cfg)
    run(dataclasses.replace(rc, rl=dataclasses.replace(rc.rl, seed=rl_seed)))


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--one":
        ap = argparse.ArgumentParser()
        ap.add_argument("--one")
        ap.add_argument("--rl-seed", type=int, default=0)
        a, flags = ap.parse_known_args()
        one(a.one, a.rl_seed, flags)
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/distill")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--teacher-steps", type=int, default=200)
    ap.add_argument("--coef", type=float, default=1.0)
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    teacher = os.path.join(out, "teacher")
    os.makedirs(out, exist_ok=True)
    train(teacher, f"--config.rl.steps={a.teacher_steps}", "--config.rl.eval_every=50")
    common = [f"--config.rl.steps={a.steps}", f"--config.rl.eval_every={a.eval_every}"]
    arms = {"grpo": [], "distill": [f"--config.method.distill.teacher={teacher}/final",
                                    f"--config.method.distill.coef={a.coef}"]}
    seeds = [int(x) for x in a.seeds.split(",")]
    for seed in seeds:
        for arm, flags in arms.items():
            wd = os.path.join(out, f"{arm}_seed{seed}")
            os.makedirs(wd, exist_ok=True)
            for part in ("sft_model", "tokenizer"):
                if not os.path.exists(os.path.join(wd, part)):
                    shutil.copytree(os.path.join(teacher, part), os.path.join(wd, part))
            train(wd, *common, *flags, rl_seed=seed)
    t = json.load(open(os.path.join(teacher, "results.json")))
    print(f"teacher: {t['before']['accuracy']:.1%} (SFT) -> {t['after']['accuracy']:.1%} after {a.teacher_steps} "
          "GRPO steps")
    import numpy as np

    curves = {arm: [curve(os.path.join(out, f"{arm}_seed{s}")) for s in seeds] for arm in arms}
    print("| step | " + " | ".join(f"{arm}: accuracy (mean +- s.e., {len(seeds)} seeds) | {arm}: tokens"
                                    for arm in arms) + " |")
    print("|---|" + "---|---|" * len(arms))
    for i, row in enumerate(curves["grpo"][0]):
        cells = []
        for arm in arms:
            acc = np.array([c[i]["accuracy"] for c in curves[arm]]) * 100
            se = acc.std(ddof=1) / np.sqrt(len(acc)) if len(acc) > 1 else float("nan")
            cells += [f"{acc.mean():.1f} +- {se:.1f}", str(int(np.mean([c[i]["tokens"] for c in curves[arm]])))]
        print(f"| {row['step']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
