"""Turning one step of logits into a sampled token and the two log-probabilities the trainer needs.

Everything here is traced: temperature, top-p and top-k are array values, so changing them never
recompiles. Filtering (top-k / top-p) needs a sort and runs under `lax.cond` only when it is switched on.
The draw itself is one uniform per row against the cumulative distribution, in two levels (block sums,
then within the chosen block): O(vocab) work and no per-entry random numbers, which dominate the cost of
a Gumbel/categorical draw over a 150k vocabulary on CPU.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf
_BLOCK = 512


class StepSample(NamedTuple):
    token: jax.Array  # [N] int32
    logprob: jax.Array  # [N] log pi(token) under the unmodified policy at temperature 1
    sampling_logprob: jax.Array  # [N] log q(token) under the distribution actually sampled from (0 if greedy)


def filter_logits(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Mask (to -inf) everything outside the top-k and outside the top-p nucleus. logits: [N, V] float32.

    top_k <= 0 and top_p >= 1 disable the respective filter. The most likely token always survives.
    """
    v = logits.shape[-1]
    sorted_desc = -jnp.sort(-logits, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)
    kth = jnp.take_along_axis(sorted_desc, jnp.broadcast_to(k - 1, logits.shape[:-1])[..., None].astype(jnp.int32),
                              axis=-1)
    keep = logits >= kth
    # Nucleus: keep a sorted entry while the mass strictly before it is < top_p.
    probs = jax.nn.softmax(jnp.where(sorted_desc >= kth, sorted_desc, NEG_INF), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    inside = before < top_p
    n_keep = jnp.maximum(jnp.sum(inside, axis=-1, keepdims=True), 1)
    p_cut = jnp.take_along_axis(sorted_desc, n_keep - 1, axis=-1)
    keep &= jnp.where(top_p < 1.0, logits >= p_cut, True)
    return jnp.where(keep, logits, NEG_INF)


def _inverse_cdf(scaled: jax.Array, row_max: jax.Array, u: jax.Array):
    """Draw token ~ softmax(scaled) given u [N] in (0, 1]; row_max [N, 1]. Returns (token, log q(token))."""
    n, v = scaled.shape
    pad = (-v) % _BLOCK
    e = jnp.exp(scaled - row_max)
    if pad:
        e = jnp.pad(e, ((0, 0), (0, pad)))
    blocks = e.reshape(n, -1, _BLOCK)
    block_cdf = jnp.cumsum(jnp.sum(blocks, axis=-1), axis=-1)  # [N, V/B]
    total = block_cdf[:, -1]
    target = u * total
    bi = jnp.minimum(jnp.sum(block_cdf < target[:, None], axis=-1), block_cdf.shape[1] - 1)
    before = jnp.where(bi > 0, jnp.take_along_axis(block_cdf, jnp.maximum(bi - 1, 0)[:, None], axis=1)[:, 0], 0.0)
    inner = jnp.take_along_axis(blocks, bi[:, None, None], axis=1)[:, 0]  # [N, B]
    inner_cdf = jnp.cumsum(inner, axis=-1) + before[:, None]
    j = jnp.minimum(jnp.sum(inner_cdf < target[:, None], axis=-1), _BLOCK - 1)
    token = jnp.minimum(bi * _BLOCK + j, v - 1).astype(jnp.int32)
    p_tok = jnp.take_along_axis(inner, j[:, None], axis=1)[:, 0]
    # Rounding at a block edge could land on a zero-probability slot; fall back to the mode there.
    ok = p_tok > 0
    token = jnp.where(ok, token, jnp.argmax(scaled, axis=-1).astype(jnp.int32))
    tok_scaled = jnp.take_along_axis(scaled, token[:, None], axis=1)[:, 0]
    logq = tok_scaled - row_max[:, 0] - jnp.log(total)
    return token, logq


def sample_step(logits: jax.Array, key: jax.Array, temperature, top_p, top_k) -> StepSample:
    """logits: [N, V] (any float dtype). temperature == 0 means greedy."""
    logits = logits.astype(jnp.float32)
    n = logits.shape[0]
    policy_lse = jax.nn.logsumexp(logits, axis=-1)
    temperature = jnp.asarray(temperature, jnp.float32)
    top_p = jnp.asarray(top_p, jnp.float32)
    top_k = jnp.asarray(top_k, jnp.int32)

    def greedy(_):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), jnp.zeros((n,), jnp.float32)

    def sampled(key):
        scaled = logits / temperature
        scaled = jax.lax.cond((top_k > 0) | (top_p < 1.0), lambda s: filter_logits(s, top_k, top_p),
                              lambda s: s, scaled)
        u = 1.0 - jax.random.uniform(key, (n,), jnp.float32)  # (0, 1]
        return _inverse_cdf(scaled, jnp.max(scaled, axis=-1, keepdims=True), u)

    token, logq = jax.lax.cond(temperature <= 0.0, greedy, sampled, key)
    logp = jnp.take_along_axis(logits, token[:, None], axis=1)[:, 0] - policy_lse
    return StepSample(token, logp, logq)
