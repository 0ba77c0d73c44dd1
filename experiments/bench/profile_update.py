"""Times the fused update alone on bench/train_step.py's workload, and optionally lists where XLA spends it.

    python experiments/bench/profile_update.py [--share-prompts 1|0] [--matmuls auto|eigen|ynn]
                                              [--scan-residuals matmuls|all] [--scan-layers 1|0] [--reps 5] [--ops 25]

Workload: the benchmarks' model (`experiment.perf.bench_model`: hidden 256, 4 layers, vocabulary 4,096, random
weights, float32) and one GRPO batch of 64 rows (8 samples of 8 prompts; 16 prompt + 64 trained completion tokens),
the PPO-clip term, AdamW. Prints the update's seconds for `--reps` calls after one compile call and their median. With `--ops N`, one
more call runs under `jax.profiler.trace` and the N largest XLA ops by total duration are listed (with
`--matmuls ynn` the weight matmuls are XLA:CPU's `ynn_fusion` kernels, summed into one line; with the CPU default
"eigen" they run inside XLA's own dot thunks, which the trace attributes less completely).
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import statistics
import tempfile
import time

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script


def op_totals(trace_dir):
    """{op family: (total ms, calls)} from the perfetto trace `jax.profiler.trace` wrote."""
    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))[-1]
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    total, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name = e["name"]
        family = "ynn_fusion (weight matmuls)" if name.startswith("ynn") else name.split(".")[0]
        total[family] += e["dur"] / 1e3
        calls[family] += 1
    return {k: (v, calls[k]) for k, v in total.most_common()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scan-residuals", default="matmuls", choices=("matmuls", "all"))
    ap.add_argument("--scan-layers", type=int, default=1, choices=(0, 1))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--matmuls", default="auto", choices=("auto", "eigen", "ynn"),
                    help="XLA:CPU matmul kernels of the update (train.update.training_compiler_options)")
    ap.add_argument("--share-prompts", type=int, default=1, choices=(0, 1),
                    help="1: each group's prompt goes through the model once (rl.prefix, the Trainer's default)")
    ap.add_argument("--ops", type=int, default=0, help="list the N costliest XLA ops of one profiled call")
    args = ap.parse_args()

    import jax
    from flax import nnx

    from jaxrl_reason.experiment.perf import bench_model
    from jaxrl_reason.rl.batch import build_token_batch, scored_size
    from jaxrl_reason.rl.losses import pg_spec
    from jaxrl_reason.rl.prefix import share_prefixes
    from jaxrl_reason.train.state import make_optimizer
    from jaxrl_reason.train.update import make_update

    vocab, rows, prompt, completion = 4096, 64, 16, 64
    rng = np.random.default_rng(0)
    group = 8  # GRPO: 8 samples of each of 8 prompts
    prompts = [rng.integers(1, vocab, prompt).tolist() for _ in range(rows // group)]
    batch = build_token_batch([prompts[r // group] for r in range(rows)],
                              [rng.integers(1, vocab, completion).tolist() for _ in range(rows)],
                              rng.normal(size=rows).astype(np.float32),
                              [(-8.0 + 0.1 * rng.normal(size=completion)).tolist() for _ in range(rows)], "solve")
    graphdef, params = nnx.split(bench_model(vocab, scan_layers=bool(args.scan_layers),
                                            scan_residuals=args.scan_residuals))
    opt = make_optimizer(1e-6, total_steps=10)
    update = make_update(graphdef, opt, (pg_spec(("solve",), aggregation="seq_mean_token_mean"),),
                         matmuls=args.matmuls)
    if args.share_prompts:
        batch = share_prefixes(batch)
    scored = scored_size(batch.rows if args.share_prompts else batch)
    opt_state = opt.init(params)
    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # noqa: E731 - the update donates its inputs

    def once():
        p, o = copy(params), copy(opt_state)
        jax.block_until_ready((p, o))
        t = time.perf_counter()
        jax.block_until_ready(update(p, o, batch, scored=scored).params)
        return time.perf_counter() - t

    once()
    times = [once() for _ in range(args.reps)]
    print(f"update, {rows} x {prompt + completion} tokens, share_prompts={args.share_prompts}, "
          f"matmuls={args.matmuls}, scan_layers={args.scan_layers}, scan_residuals={args.scan_residuals}: "
          + ", ".join(f"{t:.3f}" for t in times) + f" s; median {statistics.median(times):.3f} s")
    if args.ops:
        with tempfile.TemporaryDirectory() as d:
            p, o = copy(params), copy(opt_state)
            with jax.profiler.trace(d, create_perfetto_trace=True):
                jax.block_until_ready(update(p, o, batch, scored=scored).params)
            totals = op_totals(d)
        print(f"{'ms':>9} {'calls':>6}  op (one profiled call; executor and API spans include the ops below them)")
        for name, (ms, n) in list(totals.items())[:args.ops]:
            print(f"{ms:9.1f} {n:6d}  {name[:90]}")


if __name__ == "__main__":
    main()
