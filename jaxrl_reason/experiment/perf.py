"""What the performance tools under experiments/bench/ share: their tiny random-weight Qwen2, a median timer, the
machine's floor for a workload (its dense matmuls alone, measured with XLA), the accelerator benchmark's shapes and
synthetic GRPO batch, the host's CPU model, and the headless notebook runner (tests/test_colabs.py runs the
notebooks with it too)."""
from __future__ import annotations

import math
import platform
import statistics
import time

import numpy as np


def bench_model(vocab: int, seed: int = 0, scan_layers: bool = True, scan_residuals: str = "matmuls"):
    """The benchmarks' model: hidden 256, 4 layers, 4 / 2 heads, FFN 1024, tied embeddings, random weights."""
    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    cfg = ModelConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=1024, max_position_embeddings=2048,
                      tie_word_embeddings=True, rope_theta=1e6, scan_layers=scan_layers,
                      scan_residuals=scan_residuals)
    return init_model(cfg, seed)


def time_runs(fn, repeats: int) -> float:
    """Median wall seconds of `repeats` calls of fn()."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def matmul_weights(cfg, seed=0):
    """Random weights for `through_matmuls`: per layer (qkv [H, (heads + 2 kv) * D], o, gate_up [H, 2I], down),
    and the LM head [H, V]."""
    import jax

    h, i, v, n_layers = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    d, nq, nkv = cfg.dim_per_head, cfg.num_attention_heads, cfg.num_key_value_heads
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), 4 * n_layers + 1))
    layers = [(jax.random.normal(next(keys), (h, (nq + 2 * nkv) * d)) * 0.02,
               jax.random.normal(next(keys), (nq * d, h)) * 0.02,
               jax.random.normal(next(keys), (h, 2 * i)) * 0.02,
               jax.random.normal(next(keys), (i, h)) * 0.02) for _ in range(n_layers)]
    return layers, jax.random.normal(next(keys), (h, v)) * 0.02


def through_matmuls(x, layers, cfg):
    """x [rows, H] through every layer's dense matmuls (q/k/v, o, gate/up, down) with residual adds only: the
    arithmetic a model layer cannot avoid (plus residual adds and the gate x up product; no attention or norms)."""
    import jax.numpy as jnp

    i, q_width = cfg.intermediate_size, cfg.num_attention_heads * cfg.dim_per_head
    for qkv, o, gate_up, down in layers:
        x = x + jnp.dot(jnp.dot(x, qkv)[:, :q_width], o)
        gu = jnp.dot(x, gate_up)
        x = x + jnp.dot(gu[:, :i] * gu[:, i:], down)
    return x


def sampler_floor(cfg, batch, prompt_len, new_tokens, repeats):
    """A lower bound on any sampler's time for this workload on this machine, measured with XLA: the workload's
    dense matmuls alone (prefill over every prompt token, then `new_tokens` single-token steps: q/k/v, o,
    gate/up, down per layer and the LM head; no attention, norms, sampling or loop bookkeeping), plus reading
    the KV cache's valid slots once per step at the bandwidth a fused sum over a cache-sized array reaches."""
    import jax
    import jax.numpy as jnp

    h, n_layers, d, nkv = cfg.hidden_size, cfg.num_hidden_layers, cfg.dim_per_head, cfg.num_key_value_heads
    layers, head = matmul_weights(cfg)
    body = lambda x: through_matmuls(x, layers, cfg)  # noqa: E731

    @jax.jit
    def prefill_mm(x):  # [batch * prompt_len, H]
        y = body(x)
        return jnp.dot(y.reshape(batch, prompt_len, h)[:, -1], head)

    @jax.jit
    def decode_mm(x):  # [batch, H], new_tokens dependent steps
        def step(_, x):
            y = body(x)
            return y + 1e-3 * jnp.dot(y, head)[:, :h]
        return jax.lax.fori_loop(0, new_tokens, step, x)

    slots = prompt_len + new_tokens
    cache = jnp.ones((n_layers * 2, batch, nkv, slots, d), jnp.float32)
    read = jax.jit(lambda c: jnp.sum(c, axis=(0, 1, 2, 3)))
    xp, xd = jnp.ones((batch * prompt_len, h)) * 1e-3, jnp.ones((batch, h)) * 1e-3
    for f, a in ((prefill_mm, xp), (decode_mm, xd), (read, cache)):
        jax.block_until_ready(f(a))
    t_prefill = time_runs(lambda: jax.block_until_ready(prefill_mm(xp)), repeats)
    t_decode = time_runs(lambda: jax.block_until_ready(decode_mm(xd)), repeats)
    t_read = time_runs(lambda: jax.block_until_ready(read(cache)), max(repeats, 10))
    gb_s = cache.nbytes / t_read / 1e9
    valid_bytes = sum(n_layers * 2 * batch * nkv * (prompt_len + s) * d * 4 for s in range(new_tokens))
    return dict(prefill_mm_s=t_prefill, decode_mm_s=t_decode, kv_read_s=valid_bytes / 1e9 / gb_s, mem_gb_s=gb_s,
                floor_s=t_prefill + t_decode + valid_bytes / 1e9 / gb_s)


# Architectures as in the checkpoints' config.json (Qwen2.5-0.5B / -1.5B: 494,032,768 and 1,543,714,304
# parameters with tied embeddings); rope/eps do not change the cost and follow the releases.
QWEN = dict(vocab_size=151936, num_key_value_heads=2, tie_word_embeddings=True, attention_bias=True,
            rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=32768)
SHAPES = {
    "tiny": dict(model=dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=128, tie_word_embeddings=True,
                            attention_bias=True, max_position_embeddings=4096),
                 decode=dict(prompt_len=16, new_tokens=16),
                 grpo=dict(prompts=2, samples=4, prompt_len=16, completion_len=16, micro_batches=1)),
    "0.5b": dict(model=dict(QWEN, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                            intermediate_size=4864),
                 decode=dict(prompt_len=256, new_tokens=128),
                 grpo=dict(prompts=8, samples=8, prompt_len=256, completion_len=512, micro_batches=4)),
    "1.5b": dict(model=dict(QWEN, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                            intermediate_size=8960),
                 decode=dict(prompt_len=256, new_tokens=128),
                 grpo=dict(prompts=8, samples=8, prompt_len=256, completion_len=512, micro_batches=4)),
}


def model_config(shape: str, param_dtype: str, dtype: str):
    from jaxrl_reason.models.qwen2 import ModelConfig

    if shape not in SHAPES:
        raise ValueError(f"--shapes: unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    return ModelConfig(**SHAPES[shape]["model"], param_dtype=param_dtype, dtype=dtype)


def grpo_batch(cfg, prompts: int, samples: int, prompt_len: int, completion_len: int, micro_batches: int,
               share: bool, seed: int = 0):
    """(batch as the Trainer hands it to the update, scored, shared?): random tokens, GRPO-like advantages and
    old log-probs near a random model's uniform policy (ratios near 1, as on a first epoch)."""
    from jaxrl_reason.rl.batch import build_token_batch, pad_rows_to, scored_size
    from jaxrl_reason.rl.prefix import SharedPrefixBatch, share_prefixes

    rng = np.random.default_rng(seed)
    rows = prompts * samples
    prompt_ids = [rng.integers(1, cfg.vocab_size, prompt_len).tolist() for _ in range(prompts)]
    rewards = rng.normal(size=(prompts, samples)).astype(np.float32)
    adv = ((rewards - rewards.mean(1, keepdims=True)) / (rewards.std(1, keepdims=True) + 1e-6)).reshape(-1)
    uniform = -math.log(cfg.vocab_size)
    batch = build_token_batch([prompt_ids[r // samples] for r in range(rows)],
                              [rng.integers(1, cfg.vocab_size, completion_len).tolist() for _ in range(rows)],
                              adv, [(uniform + 0.01 * rng.normal(size=completion_len)).tolist() for _ in range(rows)],
                              "solve", length=prompt_len + completion_len)
    batch = pad_rows_to(batch, micro_batches)
    if share:
        batch = share_prefixes(batch, micro_batches) or batch
    shared = isinstance(batch, SharedPrefixBatch)
    scored = scored_size(batch.rows if shared else batch, micro_batches)
    return batch, scored, shared


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
