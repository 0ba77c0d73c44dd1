"""Accelerator benchmark: sampler decode throughput against the HBM roofline, and one GRPO update's MFU.

    python experiments/bench/accelerator.py --out runs/bench_accel      # on a lent GPU / TPU: ~4-6 minutes
    python experiments/bench/accelerator.py --out /tmp/bench_cpu         # on CPU: the `tiny` shape, ~20 s

What it measures, per model shape (random weights built in JAX, no download; bf16 params and compute on an
accelerator, float32 on CPU). All of a shape's executables (a prefill and a decode per batch, the update) are
lowered one after another and then compiled side by side before anything is timed (`--sequential-compile`:
each on its first call instead); compile seconds are reported per executable and are never in a timing.

- Decode. The library's sampler (`sampling.sampler`: jitted `prefill`, then `decode`'s `lax.while_loop` of
  single-token steps) on a fixed-length random prompt (256 tokens) for 128 new tokens at batch 1, 64 and 256,
  temperature 1, no stop token, so every row decodes every step. The decode call alone is timed (median of
  `--repeats` calls); the prefill is timed beside it, and the public `sample()` on the same work (prefill + decode
  + host work; it reuses the executables) as a cross-check.
  tokens/s = batch x new tokens / decode seconds.
  Roofline: a step must read every parameter once and the valid KV cache once, so
      bytes/step = parameter bytes + 2 x layers x kv_heads x head_dim x mean_context x batch x KV bytes/element,
      mean_context = prompt + (new + 1) / 2   (step s attends prompt + s + 1 keys),
      roofline tokens/s = batch / (bytes/step / peak HBM bandwidth).
  "of roofline" = measured / roofline tokens/s; "GB/s" = bytes/step x steps / decode seconds. On an accelerator the
  sampler's steps run in window phases (`sampling.sampler.decode_windows`): a step attends over the cache slots
  up to its phase's end, not only the valid ones, so it reads somewhat more than the roofline's KV bytes (at 128
  new tokens after a 256-token prompt the windows cover the whole cache, as on CPU): that gap is part of what is
  measured.
- GRPO update. `train.update.make_update` with the PPO-clip term (`rl.losses.pg_spec`, GRPO's aggregation) and
  AdamW (`train.state.make_optimizer`) on a batch laid out as the Trainer lays it out (each group's prompt once,
  `rl.prefix.share_prefixes`; the LM head at trained positions only, `rl.batch.scored_size`): 8 prompts x 8
  samples, 256 prompt + 512 completion tokens, 4 micro-batches (so 1.5B fits one 80 GB device). Median of
  `--grpo-steps` consecutive updates. Model FLOPs (the useful work of the layout that ran; rematerialisation not
  counted):
      6 x (matmul weights of the layers) x (tokens through the layers)     prompts once + every completion token
    + 6 x vocab x hidden x (trained positions)                             the LM head
    + 12 x layers x heads x head_dim x (sum over those tokens of the keys each attends to, causal, itself included)
  MFU = model FLOPs / step seconds / peak dense bf16 FLOP/s.

Peaks come from a table keyed by `jax.devices()[0].device_kind` (vendor datasheets, dense bf16), or from
`--peak-hbm-gbs` / `--peak-tflops`; for a device outside the table the ratios are left empty and the JSON says why.
A global `--budget-s` (default 420 s) stops new measurements from starting; what was skipped is listed. Results
(`accelerator.json`, `accelerator.md`) are rewritten after every measurement, so a run cut short keeps what it did.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from typing import Optional

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script
# The peaks table and the FLOPs / bytes formulas, shared with experiment.compile_check (no jax import).
from jaxrl_reason.parallel.roofline import (PEAKS, decode_bytes, grpo_model_flops,  # noqa: E402,F401
                                           layer_matmul_params, peak_for)
from jaxrl_reason.experiment.perf import SHAPES, grpo_batch, model_config  # noqa: E402

def _median(xs):
    return float(statistics.median(xs))


def _device_peak_gib():
    import jax

    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - CPU and some runtimes have no memory stats
        return None
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


# ----------------------------------------------------------------------------------------------------------------
# Building the model and compiling


def build_model(cfg, seed: int = 0):
    """Random weights under one jit: eager initialisation dispatches (and on an accelerator compiles) every
    initialiser op separately, a minute for 1.5B parameters on CPU."""
    import jax
    from flax import nnx

    from jaxrl_reason.models.qwen2 import init_model

    graphdef = nnx.graphdef(nnx.eval_shape(lambda: init_model(cfg, seed)))
    state = jax.block_until_ready(jax.jit(lambda: nnx.state(init_model(cfg, seed)))())
    return nnx.merge(graphdef, state)


def compile_all(jobs: dict, workers: int) -> dict:
    """Lowers every job's executables one after another (tracing holds the GIL), then compiles them all at once:
    XLA releases the GIL while it compiles, so one shape's executables (three prefills, three decodes, the update)
    take about as long as the slowest one. A job whose lowering or compile fails keeps its jitted calls (which
    compile on first use); returns {"lower_s", "compile_wall_s", "compile_sum_s", "executables", "failed"}."""
    import concurrent.futures as cf

    t0 = time.perf_counter()
    lowered, failed = {}, {}
    for name, job in jobs.items():
        try:
            lowered.update({(name, part): low for part, low in job.lower().items()})
        except Exception as e:  # noqa: BLE001
            failed[name] = f"lowering: {type(e).__name__}: {str(e)[:1000]}"
    t_lower = time.perf_counter() - t0

    def one(item):
        key, low = item
        t = time.perf_counter()
        try:
            return key, (low.compile(), time.perf_counter() - t)
        except Exception as e:  # noqa: BLE001
            return key, e

    with cf.ThreadPoolExecutor(max(1, min(workers, len(lowered) or 1))) as pool:
        compiled = dict(pool.map(one, lowered.items()))
    for (name, part), got in compiled.items():
        if isinstance(got, Exception):
            failed[name] = f"compiling {part}: {type(got).__name__}: {str(got)[:1000]}"
    for name, job in jobs.items():
        if name not in failed:
            job.use_compiled({part: got for (n, part), got in compiled.items() if n == name})
    ok = [got[1] for got in compiled.values() if not isinstance(got, Exception)]
    return dict(executables=len(ok), lower_s=t_lower, compile_wall_s=time.perf_counter() - t0 - t_lower,
                compile_sum_s=sum(ok), failed=failed)


# ----------------------------------------------------------------------------------------------------------------
# Decode


class DecodeJob:
    """One decode measurement: inputs, and the prefill / decode it runs (AOT executables, or the jitted functions)."""

    def __init__(self, model, batch: int, prompt_len: int, new_tokens: int, seed: int = 0):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        from jaxrl_reason.sampling import sampler

        self.model, self.batch, self.prompt_len, self.new_tokens = model, batch, prompt_len, new_tokens
        self.graphdef, self.state = nnx.split(model)
        rng = np.random.default_rng(seed)
        self.prompt = rng.integers(1, model.config.vocab_size, (batch, prompt_len)).astype(np.int32)
        self.tokens, self.lengths = jnp.asarray(self.prompt), jnp.full((batch,), prompt_len, jnp.int32)
        self.key = jax.random.PRNGKey(seed)
        stop = jnp.full((sampler.MAX_STOP_IDS,), -1, jnp.int32)
        # temperature 1, top-p 1, top-k 0 (no filtering, no sort), no stop ids, pad 0: as sample() passes them
        self.sampling = (jnp.float32(1.0), jnp.float32(1.0), jnp.int32(0), stop, jnp.int32(0))
        self.end_step = jnp.int32(new_tokens)
        # mesh=None spelt out as sample() spells it: jit keys its cache on the keywords given.
        static = dict(num_samples=1, max_new_tokens=new_tokens, mesh=None)
        self.run_prefill = lambda state, tokens, lengths: sampler.prefill(self.graphdef, state, tokens, lengths,
                                                                          **static)
        self.run_decode = lambda state, carry, *rest: sampler.decode(self.graphdef, state, carry, *rest, mesh=None)
        self.compile_s = None  # set when AOT executables replace the jitted calls
        self._static = static

    def carry(self, cache, last):
        """The decode loop's starting state after a prefill, built as `sample()` builds it."""
        import jax.numpy as jnp

        from jaxrl_reason.sampling import sampler

        n, new = self.batch, self.new_tokens
        return sampler.DecodeCarry(
            cache=cache, hidden=last, tokens=jnp.zeros((n, new), jnp.int32),
            logprobs=jnp.zeros((n, new), jnp.float32), sampling_logprobs=jnp.zeros((n, new), jnp.float32),
            done=jnp.zeros((n,), bool), finish=jnp.full((n,), sampler.FINISH_LENGTH, jnp.int32),
            lengths=jnp.zeros((n,), jnp.int32), positions=jnp.full((n,), self.prompt_len, jnp.int32),
            step=jnp.zeros((), jnp.int32), key=jnp.array(self.key, copy=True))

    def lower(self) -> dict:
        import jax

        from jaxrl_reason.sampling import sampler

        pre = sampler.prefill.lower(self.graphdef, self.state, self.tokens, self.lengths, **self._static)
        cache, last = jax.eval_shape(self.run_prefill, self.state, self.tokens, self.lengths)
        carry = jax.eval_shape(self.carry, cache, last)
        dec = sampler.decode.lower(self.graphdef, self.state, carry, self.end_step, *self.sampling, mesh=None)
        return {"prefill": pre, "decode": dec}

    def use_compiled(self, compiled: dict):
        """Static arguments are baked into an AOT executable: it takes the array arguments only."""
        (pre, pre_s), (dec, dec_s) = compiled["prefill"], compiled["decode"]
        self.run_prefill = pre
        self.run_decode = dec
        self.compile_s = (pre_s, dec_s)


def bench_decode(job: DecodeJob, repeats: int, param_bytes: int, peak_gbs: Optional[float],
                 sample_check: bool) -> dict:
    import jax
    import jax.numpy as jnp

    from jaxrl_reason.models.qwen2 import as_dtype
    from jaxrl_reason.sampling import sampler

    cfg = job.model.config
    prefill_t, decode_t, out = [], [], None
    calls = repeats if job.compile_s else repeats + 1  # without AOT executables the first call compiles
    for _ in range(calls):
        t0 = time.perf_counter()
        cache, last = jax.block_until_ready(job.run_prefill(job.state, job.tokens, job.lengths))
        prefill_t.append(time.perf_counter() - t0)
        carry = jax.block_until_ready(job.carry(cache, last))
        del cache, last  # the carry holds (and the decode call donates) them
        t0 = time.perf_counter()
        out = jax.block_until_ready(job.run_decode(job.state, carry, job.end_step, *job.sampling))
        decode_t.append(time.perf_counter() - t0)
        del carry
    steps, out_lengths = int(out.step), np.asarray(out.lengths)
    if steps != job.new_tokens or not np.all(out_lengths == job.new_tokens):
        raise RuntimeError(f"decode ran {steps} steps with lengths {out_lengths}; expected {job.new_tokens} "
                           "for every row")
    del out
    timed_pre, timed_dec = (prefill_t, decode_t) if job.compile_s else (prefill_t[1:], decode_t[1:])
    prefill_s, decode_s = _median(timed_pre), _median(timed_dec)
    if job.compile_s:
        prefill_compile, decode_compile = job.compile_s
        compile_how = "AOT, alongside the shape's other executables"
    else:
        prefill_compile, decode_compile = max(prefill_t[0] - prefill_s, 0.0), max(decode_t[0] - decode_s, 0.0)
        compile_how = "first call minus median call"
    batch, new = job.batch, job.new_tokens
    decode_tokens = batch * new
    roof = decode_bytes(cfg, batch, job.prompt_len, new, param_bytes, jnp.dtype(as_dtype(cfg.dtype)).itemsize)
    tok_s = decode_tokens / decode_s
    row = dict(batch=batch, prompt_len=job.prompt_len, new_tokens=new, repeats=repeats,
               timing="jitted prefill and decode called as sample() calls them; the decode call timed alone",
               compile_how=compile_how, prefill_compile_s=prefill_compile, decode_compile_s=decode_compile,
               prefill_s=prefill_s, decode_s=decode_s, decode_times_s=timed_dec, decode_tokens=decode_tokens,
               ms_per_step=decode_s / new * 1e3, tokens_per_s=tok_s,
               achieved_gbs=roof["bytes_per_step"] * new / decode_s / 1e9, **roof)
    if peak_gbs:
        roofline = batch * peak_gbs * 1e9 / roof["bytes_per_step"]
        row.update(roofline_tokens_per_s=roofline, roofline_fraction=tok_s / roofline)
    else:
        row.update(roofline_tokens_per_s=None, roofline_fraction=None)
    row.update(sample_first_call_s=None, sample_call_s=None, sample_call_tokens_per_s=None)
    if sample_check:
        # The public entry point (its own jit cache: the first call traces, and compiles or reads the persistent
        # cache), then one timed call: prefill + decode + the host work around them.
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            res = sampler.sample(job.model, job.prompt.tolist(), job.key, max_new_tokens=new, temperature=1.0)
            times.append(time.perf_counter() - t0)
        row.update(sample_first_call_s=times[0], sample_call_s=times[1],
                   sample_call_tokens_per_s=int(np.sum(res.lengths)) / times[1])
    return row


# ----------------------------------------------------------------------------------------------------------------
# GRPO update


def batch_token_counts(batch, shared: bool) -> tuple[int, int]:
    """(real tokens through the layers, trained positions) of the batch that actually ran."""
    if shared:
        forwarded = int(np.sum(batch.prefix_valid)) + int(np.sum(np.asarray(batch.rows.segment_ids)[:, 1:] != 0))
        return forwarded, int(np.sum(np.asarray(batch.rows.loss_mask) != 0))
    return int(np.sum(np.asarray(batch.segment_ids) != 0)), int(np.sum(np.asarray(batch.loss_mask) != 0))


class GrpoJob:
    """One update measurement. The model's parameters are donated (consumed) by the first update: run it last."""

    def __init__(self, model, prompts: int, samples: int, prompt_len: int, completion_len: int, micro_batches: int,
                 share: bool, logprob_chunk: Optional[int]):
        import jax
        from flax import nnx

        from jaxrl_reason.rl.losses import pg_spec
        from jaxrl_reason.train.state import make_optimizer
        from jaxrl_reason.train.update import make_update

        cfg = model.config
        self.cfg = cfg
        self.settings = dict(prompts=prompts, samples=samples, rows=prompts * samples, prompt_len=prompt_len,
                             completion_len=completion_len, micro_batches=micro_batches, logprob_chunk=logprob_chunk)
        batch, self.scored, self.shared = grpo_batch(cfg, prompts, samples, prompt_len, completion_len,
                                                     micro_batches, share)
        forwarded, trained = batch_token_counts(batch, self.shared)
        self.flops = grpo_model_flops(cfg, prompts, samples, prompt_len, completion_len, self.shared)
        if (forwarded, trained) != (self.flops["tokens_forwarded"], self.flops["trained_tokens"]):
            raise RuntimeError(f"the batch forwards {forwarded} tokens and trains {trained}; the FLOPs formula "
                               f"assumes {self.flops['tokens_forwarded']} and {self.flops['trained_tokens']}")
        graphdef, self.params = nnx.split(model)
        opt = make_optimizer(1e-6, total_steps=1000)
        self.update = make_update(graphdef, opt, (pg_spec(("solve",), aggregation="seq_mean_token_mean"),),
                                  micro_batches=micro_batches, logprob_chunk=logprob_chunk)
        self.opt_state = opt.init(self.params)
        self.batch = jax.device_put(batch)
        self.run = lambda params, opt_state, batch: self.update(params, opt_state, batch, scored=self.scored)
        self.compile_s = None

    def lower(self) -> dict:
        return {"update": self.update.lower(self.params, self.opt_state, self.batch, scored=self.scored)}

    def use_compiled(self, compiled: dict):
        self.run, self.compile_s = compiled["update"]


def bench_grpo(job: GrpoJob, steps: int, peak_tflops: Optional[float]) -> dict:
    import jax

    params, opt_state = job.params, job.opt_state
    job.params = job.opt_state = None  # donated below
    times, applied = [], True
    for _ in range(steps if job.compile_s else steps + 1):
        t0 = time.perf_counter()
        out = job.run(params, opt_state, job.batch)
        jax.block_until_ready(out.params)
        times.append(time.perf_counter() - t0)
        params, opt_state = out.params, out.opt_state
        applied = applied and all(bool(v) for v in jax.device_get(out.finite).values())
    timed = times if job.compile_s else times[1:]
    step_s = _median(timed)
    compile_s = job.compile_s if job.compile_s else max(times[0] - step_s, 0.0)
    f = job.flops
    row = dict(job.settings, shared_prompts=job.shared, scored=job.scored, steps=steps, compile_s=compile_s,
               compile_how="AOT, alongside the shape's other executables" if job.compile_s
               else "first call minus median call", step_s=step_s, step_times_s=timed,
               update_applied=applied, **f, trained_tokens_per_s=f["trained_tokens"] / step_s,
               achieved_tflops=f["model_flops"] / step_s / 1e12)
    row["mfu"] = row["achieved_tflops"] / peak_tflops if peak_tflops else None
    del params, opt_state, out
    return row


# ----------------------------------------------------------------------------------------------------------------
# Report


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_table(res: dict) -> str:
    m = res["meta"]
    peak = m["peak"]
    lines = [f"# Accelerator benchmark: {m['device_kind']} ({m['backend']}), jax {m['jax_version']}", "",
             f"Peak: {_f(peak['hbm_gbs'], '.4g')} GB/s HBM, {_f(peak['tflops'], '.4g')} TFLOP/s dense bf16 "
             f"({peak['source']}). Params {m['param_dtype']}, compute and KV cache {m['dtype']}. "
             f"Wall {m['elapsed_s']:.0f} s of a {m['budget_s']:.0f} s budget.", ""]
    if peak["note"]:
        lines += [f"Ratios empty: {peak['note']}", ""]
    lines += ["## Decode (sampler prefill + while_loop decode; decode call timed alone)", "",
              "| shape | batch | prompt | new | compile s (prefill+decode) | prefill s | decode s | ms/step | tok/s "
              "| roofline tok/s | of roofline | GB/s | sample() tok/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["decode"]:
        lines.append(
            f"| {r['shape']} | {r['batch']} | {r['prompt_len']} | {r['new_tokens']} | "
            f"{r['prefill_compile_s']:.1f}+{r['decode_compile_s']:.1f} | {r['prefill_s']:.3f} | {r['decode_s']:.3f} | "
            f"{r['ms_per_step']:.2f} | {r['tokens_per_s']:.0f} | {_f(r['roofline_tokens_per_s'], '.0f')} | "
            f"{_f(r['roofline_fraction'], '.1%')} | {r['achieved_gbs']:.0f} | "
            f"{_f(r['sample_call_tokens_per_s'], '.0f')} |")
    lines += ["", "## GRPO update (make_update, PPO-clip, AdamW)", "",
              "| shape | rows | prompt+completion | micro-batches | shared prompts | compile s | step s | "
              "model TFLOP | TFLOP/s | MFU | trained tok/s |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["grpo"]:
        lines.append(
            f"| {r['shape']} | {r['prompts']}x{r['samples']} | {r['prompt_len']}+{r['completion_len']} | "
            f"{r['micro_batches']} | {'yes' if r['shared_prompts'] else 'no'} | {r['compile_s']:.1f} | "
            f"{r['step_s']:.3f} | {r['model_flops'] / 1e12:.3f} | {r['achieved_tflops']:.1f} | "
            f"{_f(r['mfu'], '.1%')} | {r['trained_tokens_per_s']:.0f} |")
    lines += ["", f"Roofline bytes/step: {m['formulas']['decode_bytes_per_step']}.",
              f"Model FLOPs: {m['formulas']['grpo_model_flops']}."]
    for kind, title in (("skipped", "Skipped"), ("errors", "Failed")):
        if res[kind]:
            lines += ["", f"{title}:"] + [f"- {s['what']}: {s['why']}" for s in res[kind]]
    return "\n".join(lines) + "\n"


def write_outputs(res: dict, out_dir: str, t_start: float) -> None:
    res["meta"]["elapsed_s"] = time.perf_counter() - t_start
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "accelerator.json"), "w") as f:
        json.dump(res, f, indent=2, allow_nan=False)
    with open(os.path.join(out_dir, "accelerator.md"), "w") as f:
        f.write(render_table(res))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None, help="comma list of " + ", ".join(SHAPES)
                    + " (default: 0.5b,1.5b on an accelerator, tiny on CPU)")
    ap.add_argument("--batches", default="1,64,256", help="decode batch sizes")
    ap.add_argument("--out", default="runs/bench_accel", help="directory for accelerator.json and accelerator.md")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="no new measurement starts after this many seconds (the one running finishes)")
    ap.add_argument("--prompt-len", type=int, default=None, help="decode prompt tokens (default: per shape)")
    ap.add_argument("--new-tokens", type=int, default=None, help="decode new tokens (default: per shape)")
    ap.add_argument("--repeats", type=int, default=3, help="timed decode calls after the compiling one")
    ap.add_argument("--grpo-steps", type=int, default=3, help="timed updates after the compiling one (0: no GRPO)")
    ap.add_argument("--grpo-prompts", type=int, default=None)
    ap.add_argument("--grpo-samples", type=int, default=None)
    ap.add_argument("--grpo-prompt-len", type=int, default=None)
    ap.add_argument("--grpo-completion-len", type=int, default=None)
    ap.add_argument("--micro-batches", type=int, default=None)
    ap.add_argument("--logprob-chunk", type=int, default=None, help="make_update's logprob_chunk (default none)")
    ap.add_argument("--no-share-prompts", action="store_true", help="every row carries its prompt through the update")
    ap.add_argument("--param-dtype", default=None, help="default bfloat16 on an accelerator, float32 on CPU")
    ap.add_argument("--dtype", default=None, help="compute / KV dtype; default as --param-dtype")
    ap.add_argument("--peak-hbm-gbs", type=float, default=None, help="override the table's HBM bandwidth, GB/s")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the table's dense bf16 TFLOP/s")
    ap.add_argument("--compile-cache", default=None,
                    help="JAX persistent compilation cache dir (a rerun on the same machine skips compiles); "
                         "default /tmp/jaxrl_reason_xla_cache on an accelerator, none on CPU; '' disables")
    ap.add_argument("--sequential-compile", action="store_true",
                    help="compile each executable on its first call instead of all of a shape's at once up front")
    ap.add_argument("--compile-workers", type=int, default=None, help="parallel compiles (default: CPU count)")
    ap.add_argument("--sample-check", choices=("all", "last", "none"), default="all",
                    help="also time the public sample() at every batch (it reuses the executables), the last, or none")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    import jax
    from flax import nnx

    backend = jax.default_backend()
    accel = backend != "cpu"
    cache_dir = args.compile_cache if args.compile_cache is not None else (
        "/tmp/jaxrl_reason_xla_cache" if accel else "")
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
    shapes = [s.strip() for s in (args.shapes or ("0.5b,1.5b" if accel else "tiny")).split(",") if s.strip()]
    for s in shapes:
        if s not in SHAPES:
            raise SystemExit(f"--shapes: unknown shape {s!r}; known: {', '.join(SHAPES)}")
    param_dtype = args.param_dtype or ("bfloat16" if accel else "float32")
    dtype = args.dtype or param_dtype
    dev = jax.devices()[0]
    kind = dev.device_kind
    table = peak_for(kind)
    hbm = args.peak_hbm_gbs if args.peak_hbm_gbs is not None else (table[1] if table else None)
    tflops = args.peak_tflops if args.peak_tflops is not None else (table[2] if table else None)
    source = ", ".join(x for x in (
        f"table entry {table[0]!r}" if table and (args.peak_hbm_gbs is None or args.peak_tflops is None) else "",
        "--peak-hbm-gbs" if args.peak_hbm_gbs is not None else "",
        "--peak-tflops" if args.peak_tflops is not None else "") if x) or "none"
    note = ""
    if hbm is None or tflops is None:
        empty = " and ".join(x for x in ("roofline" if hbm is None else "", "MFU" if tflops is None else "") if x)
        note = (f"device_kind {kind!r} is not in the peak table and no --peak-hbm-gbs/--peak-tflops was given: "
                f"absolute numbers only, {empty} left empty")
    res = dict(
        meta=dict(device_kind=kind, backend=backend, devices=jax.device_count(), jax_version=jax.__version__,
                  python=platform.python_version(), host=platform.node(),
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  argv=list(sys.argv[1:] if argv is None else argv), shapes=shapes, param_dtype=param_dtype,
                  dtype=dtype, budget_s=args.budget_s, elapsed_s=0.0, compile_cache=cache_dir or None,
                  peak=dict(hbm_gbs=hbm, tflops=tflops, source=source, note=note),
                  formulas=dict(
                      decode_bytes_per_step="param bytes + 2*layers*kv_heads*head_dim*(prompt+(new+1)/2)*batch*"
                                            "KV bytes; roofline tok/s = batch*peak_HBM/bytes_per_step",
                      grpo_model_flops="6*layers*layer_matmul_params*tokens_forwarded + 6*vocab*hidden*"
                                       "trained_tokens + 12*layers*heads*head_dim*attended_pairs (causal, "
                                       "shared prompts counted once); MFU = model_flops/step_s/peak")),
        compile=[], decode=[], grpo=[], skipped=[], errors=[])
    print(f"device {kind} ({backend}); peak {hbm} GB/s, {tflops} TFLOP/s ({source}); shapes {shapes}; "
          f"params {param_dtype}, compute {dtype}", flush=True)

    def over_budget(what: str) -> bool:
        elapsed = time.perf_counter() - t_start
        if elapsed < args.budget_s:
            return False
        res["skipped"].append(dict(what=what, why=f"budget: {elapsed:.0f} s elapsed >= --budget-s {args.budget_s:g}"))
        print(f"skip {what}: over budget", flush=True)
        return True

    def attempt(what: str, fn):
        t0 = time.perf_counter()
        try:
            row = fn()
        except Exception as e:  # noqa: BLE001 - one failed measurement (e.g. out of memory) must not lose the rest
            res["errors"].append(dict(what=what, why=f"{type(e).__name__}: {str(e)[:2000]}"))
            print(f"FAILED {what}: {type(e).__name__}: {str(e)[:500]}", flush=True)
            row = None
        else:
            row["wall_s"] = time.perf_counter() - t0
            row["device_peak_gib_so_far"] = _device_peak_gib()
        write_outputs(res, args.out, t_start)
        return row

    batches = _ints(args.batches)
    for shape in shapes:
        spec = SHAPES[shape]
        prompt_len = args.prompt_len or spec["decode"]["prompt_len"]
        new_tokens = args.new_tokens or spec["decode"]["new_tokens"]
        g = dict(spec["grpo"])
        for k in ("prompts", "samples", "prompt_len", "completion_len"):
            v = getattr(args, f"grpo_{k}")
            g[k] = v if v is not None else g[k]
        g["micro_batches"] = args.micro_batches or g["micro_batches"]
        names = [f"{shape} decode batch {b}" for b in batches] + ([f"{shape} grpo"] if args.grpo_steps > 0 else [])
        if over_budget(f"{shape} (all of it: {', '.join(names)})"):
            continue
        cfg = model_config(shape, param_dtype, dtype)
        t0 = time.perf_counter()
        try:
            model = build_model(cfg)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: the next shape may still fit
            res["errors"].append(dict(what=f"{shape} build", why=f"{type(e).__name__}: {str(e)[:2000]}"))
            write_outputs(res, args.out, t_start)
            continue
        param_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
        init_s = time.perf_counter() - t0
        print(f"{shape}: {cfg.num_params() / 1e6:.1f}M params ({param_bytes / 2**30:.2f} GiB), built in "
              f"{init_s:.1f} s", flush=True)
        jobs = {}
        for b in batches:
            jobs[f"{shape} decode batch {b}"] = DecodeJob(model, b, prompt_len, new_tokens)
        if args.grpo_steps > 0:
            what = f"{shape} grpo"
            try:
                jobs[what] = GrpoJob(model, g["prompts"], g["samples"], g["prompt_len"], g["completion_len"],
                                     g["micro_batches"], not args.no_share_prompts, args.logprob_chunk)
            except Exception as e:  # noqa: BLE001
                res["errors"].append(dict(what=what, why=f"{type(e).__name__}: {str(e)[:2000]}"))
                print(f"FAILED {what}: {type(e).__name__}: {str(e)[:500]}", flush=True)
        if not args.sequential_compile:
            info = compile_all(jobs, args.compile_workers or os.cpu_count() or 1)
            res["compile"].append(dict(shape=shape, **info))
            for name, why in info["failed"].items():
                res["errors"].append(dict(what=f"{name}: AOT (it compiles on its first call instead)", why=why))
            print(f"{shape}: lowered {info['executables']} executables in {info['lower_s']:.1f} s, compiled them in "
                  f"{info['compile_wall_s']:.1f} s wall ({info['compile_sum_s']:.1f} s summed)"
                  + (f"; AOT failed for {', '.join(info['failed'])}" if info["failed"] else ""), flush=True)
            write_outputs(res, args.out, t_start)
        for i, b in enumerate(batches):
            what = f"{shape} decode batch {b}"
            if over_budget(what):
                continue
            check = args.sample_check == "all" or (args.sample_check == "last" and i == len(batches) - 1)
            row = attempt(what, lambda: dict(shape=shape, num_params=cfg.num_params(), init_s=init_s, **bench_decode(
                jobs.pop(what), args.repeats, param_bytes, hbm, check)))
            if row:
                res["decode"].append(row)
                write_outputs(res, args.out, t_start)
                print(f"{what}: {row['tokens_per_s']:.0f} tok/s, {row['ms_per_step']:.2f} ms/step, "
                      f"of roofline {_f(row['roofline_fraction'], '.1%')} (compile {row['prefill_compile_s']:.1f}"
                      f"+{row['decode_compile_s']:.1f} s)", flush=True)
        what = f"{shape} grpo"
        if what in jobs and not over_budget(what):
            row = attempt(what, lambda: dict(shape=shape, num_params=cfg.num_params(), **bench_grpo(
                jobs.pop(what), args.grpo_steps, tflops)))
            if row:
                res["grpo"].append(row)
                write_outputs(res, args.out, t_start)
                print(f"{what}: {row['step_s']:.3f} s/step, {row['achieved_tflops']:.1f} TFLOP/s, "
                      f"MFU {_f(row['mfu'], '.1%')} (compile {row['compile_s']:.1f} s)", flush=True)
        jobs.clear()
        del model
        jax.clear_caches()  # the next shape's executables replace these; free what they pin
    write_outputs(res, args.out, t_start)
    print()
    print(render_table(res), flush=True)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
