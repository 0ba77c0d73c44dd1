"""Compare arms of one config over seeds: train each (arm, seed), evaluate, report against a baseline arm.

    python experiments/compare.py --config jaxrl_reason/configs/rlv.py --arm grpo:method.name=grpo \
        --arm rlv:method.name=rlv --seeds 0,1,2 --baseline grpo [--grid method.extra.verify_weight=0.3,1,3] \
        [--set rl.steps=100] [--eval n=16,limit=256] [--out runs/compare_rlv]

An arm is NAME:KEY=VALUE,KEY=VALUE (config overrides, parsed as experiments/train.py parses --config.KEY=VALUE;
NAME alone is the config as it is). --grid KEY=V1,V2,... makes every arm but the baseline one arm per value
(several --grid: their product). --set KEY=VALUE overrides the config of every arm. --eval FIELD=VALUE,... turns
on the test-time evaluation of each final checkpoint on its held-out split (`experiment.evaluation.EvalSpec`
fields; max_new_tokens, temperature, seed, check_tokens, the guided layout / critique / correction formats, the
prompt wording and the tools default to each run's own: a tool arm is evaluated with its tools); without it the
report holds the runs' greedy held-out accuracy only.

`--set warmup_seed=S` starts every seed's RL from one warm-up, trained at seed S on seed S's data (the seeds then
vary the RL loop only). Cells train in OUT/runs/ARM/seedSEED (`experiment.pipeline.run`), arms with the same
warm-up settings start from one warm-up (OUT/warmups/), evaluations are cached by checkpoint and spec
(OUT/evals/), so a killed compare rerun with the same command trains and evaluates only what is missing. Writes
OUT/summary.md (per-arm medians and per-seed values, differences against the baseline with bootstrap intervals,
pooled over seeds), summary.json and curves.png (held-out accuracy against training tokens, mean +- s.e. over
seeds); with a tool arm, tools.png (its reward, tool calls per sample and their success rate per RL step).
`jaxrl_reason.experiment.compare` holds it all.
"""
from __future__ import annotations

import argparse
import typing

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment import compare as cmp  # noqa: E402
from jaxrl_reason.experiment.evaluation import RUN_OWN, EvalSpec, read_eval_spec  # noqa: E402



def eval_spec(text: str) -> EvalSpec:
    """FIELD=VALUE,... as an EvalSpec whose run-own fields default to the run's; values typed by the field."""
    import ast

    hints = typing.get_type_hints(EvalSpec)
    values = dict.fromkeys(RUN_OWN)
    for item in cmp._SPLIT.split(text) if text.strip() else []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--eval {item!r}: write FIELD=VALUE (e.g. n=16)")
        if key in hints and hints[key] in (str, "str"):
            values[key] = value
        else:
            try:
                values[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                values[key] = value
    try:
        return read_eval_spec(values)
    except (ValueError, TypeError) as e:
        raise SystemExit(f"--eval: {e}") from None


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", required=True, help="the base config file (as experiments/train.py --config)")
    p.add_argument("--arm", action="append", required=True, help="NAME[:KEY=VALUE,...]; repeat for each arm")
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    p.add_argument("--baseline", help="the arm the others are compared with (default: the first --arm)")
    p.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...: one arm per value (not the baseline)")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE for every arm's config")
    p.add_argument("--eval", help="EvalSpec fields FIELD=VALUE,...; evaluates every final checkpoint")
    p.add_argument("--out", default="runs/compare", help="output directory (default runs/compare)")
    p.add_argument("--draws", type=int, default=2000, help="bootstrap draws of each interval")
    args = p.parse_args(argv)

    from absl import logging

    from jaxrl_reason.configs import load_config_file

    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    grid = {}
    for g in args.grid:
        key, sep, values = g.partition("=")
        if not sep or not values:
            raise SystemExit(f"--grid {g!r}: write KEY=V1,V2,... (e.g. method.extra.verify_weight=0.3,1,3)")
        grid[key] = [v for v in values.split(",") if v]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    try:
        base = cmp.apply_overrides(load_config_file(args.config), args.set)
        arms = [cmp.Arm.parse(a) for a in args.arm]
        spec = eval_spec(args.eval) if args.eval is not None else None
        summary = cmp.compare(base, arms, seeds, spec, baseline=args.baseline, out_dir=args.out, grid=grid,
                              draws=args.draws)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"compare: {e}") from None
    print(cmp.markdown_report(summary))
    print(f"wrote {summary['out_dir']}/summary.md, summary.json, curves.png")
    return summary


if __name__ == "__main__":
    main()
