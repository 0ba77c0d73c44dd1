"""The update with the LM head at every position vs only at trained positions, on an RL^V-shaped batch.

    python experiments/bench/update_head.py [--vocab 4096 32768] [--reps 5]

Batch (one GRPO^V step of the CPU benchmarks' shape): 32 solve rows (16-token prompt, 64 trained completion
tokens) and 32 verify rows (the same prompt and completion, then a 16-token verify question, one trained
"Yes"/"No" token), padded to one length bucket. The model is the benchmarks' tiny Qwen2
(`jaxrl_reason.experiment.perf.bench_model`: hidden 256, 4 layers, tied embeddings, random weights, float32) at
each vocabulary size. Both arms run the same jitted `make_update`
(GRPO clip term + lambda=1 verify SFT term, AdamW); `scored=None` is the baseline, `scored=scored_size(batch)`
the head at trained positions only. Reported: median seconds per update over `--reps` calls after one compile
call, the ratio baseline / trained-only, and the largest loss difference between the arms.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

PROMPT, COMPLETION, QUESTION, ROWS = 16, 64, 16, 32


def rlv_batch(vocab, seed=0):
    from jaxrl_reason.buckets import length_bucket
    from jaxrl_reason.rl.batch import build_token_batch, concat_batches

    rng = np.random.default_rng(seed)
    length = length_bucket(PROMPT + COMPLETION + QUESTION + 1)  # one shape for both row kinds
    prompts = [rng.integers(1, vocab, PROMPT).tolist() for _ in range(ROWS)]
    completions = [rng.integers(1, vocab, COMPLETION).tolist() for _ in range(ROWS)]
    adv = rng.normal(size=ROWS).astype(np.float32)
    old = [(-8.0 + 0.1 * rng.normal(size=COMPLETION)).tolist() for _ in range(ROWS)]
    solve = build_token_batch(prompts, completions, adv, old, "solve", length=length)
    verify_prompts = [p + c + rng.integers(1, vocab, QUESTION).tolist() for p, c in zip(prompts, completions)]
    verdicts = [[int(rng.integers(1, vocab))] for _ in range(ROWS)]
    verify = build_token_batch(verify_prompts, verdicts, [0.0] * ROWS, None, "verify", length=length)
    return concat_batches([solve, verify])


def time_update(update, params, opt_state, batch, scored, reps):
    import jax

    copy = lambda tree: jax.tree.map(lambda x: x.copy(), tree)  # the update donates params and opt_state
    out = update(copy(params), copy(opt_state), batch, scored=scored)
    jax.block_until_ready(out.params)
    times = []
    for _ in range(reps):
        p, o = copy(params), copy(opt_state)
        jax.block_until_ready((p, o))
        t = time.perf_counter()
        out = update(p, o, batch, scored=scored)
        jax.block_until_ready(out.params)
        times.append(time.perf_counter() - t)
    return statistics.median(times), {k: float(v) for k, v in out.metrics.items()}, out.finite


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, nargs="+", default=[4096, 32768])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    from flax import nnx

    from jaxrl_reason.experiment.perf import bench_model
    from jaxrl_reason.rl.batch import scored_size
    from jaxrl_reason.rl.losses import pg_spec, sft_spec
    from jaxrl_reason.train.state import make_optimizer
    from jaxrl_reason.train.update import make_update

    terms = (pg_spec(("solve",)), sft_spec(("verify",), name="verify", weight=1.0))
    print(f"RL^V update: {ROWS} solve rows ({PROMPT}+{COMPLETION} tokens) + {ROWS} verify rows "
          f"({PROMPT}+{COMPLETION}+{QUESTION} tokens, 1 trained); median of {args.reps} updates")
    print(f"{'vocab':>7}{'T':>5}{'trained':>9}{'scored':>8}{'all-positions s':>17}{'trained-only s':>16}"
          f"{'ratio':>7}{'max |d loss|':>14}")
    for vocab in args.vocab:
        batch = rlv_batch(vocab)
        graphdef, params = nnx.split(bench_model(vocab))
        opt = make_optimizer(1e-6, total_steps=10)
        update = make_update(graphdef, opt, terms)
        scored = scored_size(batch)
        base_s, base_m, _ = time_update(update, params, opt.init(params), batch, None, args.reps)
        part_s, part_m, finite = time_update(update, params, opt.init(params), batch, scored, args.reps)
        if not all(bool(v) for v in finite.values()):
            raise SystemExit(f"vocab {vocab}: the trained-only update was refused: {dict(finite)}")
        dloss = max(abs(part_m[k] - base_m[k]) for k in ("loss/pg", "loss/verify"))
        print(f"{vocab:>7}{batch.length:>5}{int((batch.loss_mask != 0).sum()):>9}{scored:>8}{base_s:>17.3f}"
              f"{part_s:>16.3f}{base_s / part_s:>6.2f}x{dloss:>14.2e}")


if __name__ == "__main__":
    main()
