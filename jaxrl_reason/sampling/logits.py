"""Turning one step of logits into a sampled token and the two log-probabilities the trainer needs.

Everything here is traced: temperature, top-p and top-k are array values, so changing them never
recompiles. Filtering (top-k / top-p) needs a sort and runs under `lax.cond` only when it is switched on; it
yields one threshold per row, so the filtered logits are never materialised. The draw itself is one uniform
per row against the cumulative distribution, in two levels (block sums, then within the chosen block): O(vocab)
work and no per-entry random numbers, which dominate the cost of a Gumbel/categorical draw over a 150k
vocabulary on CPU. Nothing of size [rows, vocab] is written besides the logits themselves: block sums are
reduced straight from the logits and only the chosen block's probabilities are recomputed.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf
_MAX_BLOCK = 512


class StepSample(NamedTuple):
    token: jax.Array  # [N] int32
    logprob: jax.Array  # [N] log pi_T(token): the tempered policy softmax(logits / T), untruncated (T = 1 if greedy)
    sampling_logprob: jax.Array  # [N] log q(token) under the distribution actually sampled from (0 if greedy)


def keep_threshold(logits: jax.Array, top_k: jax.Array, top_p: jax.Array, temperature=1.0) -> jax.Array:
    """The smallest logit that top-k and the top-p nucleus of softmax(logits / temperature) keep, per row:
    [N, V] float32 -> [N, 1], an element of `logits` itself, so `logits >= threshold` is exact (comparing
    against a recomputed logits / temperature could lose the boundary token to a rounding difference).

    top_k <= 0 and top_p >= 1 disable the respective filter (then the threshold is the row minimum). The most
    likely token always survives.
    """
    v = logits.shape[-1]
    sorted_desc = -jnp.sort(-logits, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)
    kth = jnp.take_along_axis(sorted_desc, jnp.broadcast_to(k - 1, logits.shape[:-1])[..., None].astype(jnp.int32),
                              axis=-1)
    # Nucleus: keep a sorted entry while the mass strictly before it is < top_p.
    probs = jax.nn.softmax(jnp.where(sorted_desc >= kth, sorted_desc / temperature, NEG_INF), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    n_keep = jnp.maximum(jnp.sum(before < top_p, axis=-1, keepdims=True), 1)
    p_cut = jnp.take_along_axis(sorted_desc, n_keep - 1, axis=-1)
    return jnp.where(top_p < 1.0, jnp.maximum(kth, p_cut), kth)


def block_size(vocab: int) -> int:
    """Width of the first level of the inverse CDF: the largest power of two <= 512 that divides the vocabulary
    (128 for Qwen's 151,936), so [N, V] -> [N, V / block, block] is a free reshape and the block sums read the
    logits once without a copy; 512 with a ragged last block when that would be under 64."""
    b = _MAX_BLOCK
    while vocab % b and b > 64:
        b //= 2
    return b if vocab % b == 0 else _MAX_BLOCK


def _block_sums(x: jax.Array, block: int) -> jax.Array:
    """Sums of consecutive `block`-wide column blocks of x [N, V] -> [N, ceil(V / block)], without padding x."""
    # x is an elementwise expression of the logits (an exp). XLA:CPU fuses such an expression into a sum
    # reduction, where the exp runs several times slower than in an elementwise loop; a matmul with a ones
    # vector sums the same values but keeps the exp a separate elementwise pass.
    n, v = x.shape
    full = v // block
    parts = []
    if full:
        parts.append(jnp.dot(x[:, :full * block].reshape(n, full, block), jnp.ones((block,), x.dtype),
                             precision=jax.lax.Precision.HIGHEST))
    if v % block:
        parts.append(jnp.sum(x[:, full * block:], axis=-1, keepdims=True))
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=1)


def _inverse_cdf(logits: jax.Array, weight_fn, block_cdf: jax.Array, u: jax.Array, block: int):
    """Draw token ~ w / sum(w), w = weight_fn(logits) >= 0 elementwise, given the running sums of its blocks
    [N, V/B] and u [N] in (0, 1]. Only the chosen block's weights are recomputed (from a gather of the logits);
    the [N, V] weights are never materialised. Returns (token [N] int32, total [N])."""
    n, v = logits.shape
    total = block_cdf[:, -1]
    target = u * total
    bi = jnp.minimum(jnp.sum(block_cdf < target[:, None], axis=-1), block_cdf.shape[1] - 1)
    before = jnp.where(bi > 0, jnp.take_along_axis(block_cdf, jnp.maximum(bi - 1, 0)[:, None], axis=1)[:, 0], 0.0)
    idx = bi[:, None] * block + jnp.arange(block)[None, :]  # [N, B]
    inside = idx < v  # the last block may be partial
    inner = jnp.where(inside, weight_fn(jnp.take_along_axis(logits, jnp.minimum(idx, v - 1), axis=1)), 0.0)
    inner_cdf = jnp.cumsum(inner, axis=-1) + before[:, None]
    j = jnp.minimum(jnp.sum(inner_cdf < target[:, None], axis=-1), block - 1)
    p_tok = jnp.take_along_axis(inner, j[:, None], axis=1)[:, 0]
    # The chosen block has positive mass, but cumsum rounding can leave j on a zero-weight slot (filtered, or past
    # the vocabulary): take the block's most likely token there.
    j = jnp.where(p_tok > 0, j, jnp.argmax(inner, axis=-1))
    return (bi * block + j).astype(jnp.int32), total


def sample_with_uniform(logits: jax.Array, u: jax.Array, temperature, top_p, top_k) -> StepSample:
    """logits: [N, V] (any float dtype); u: [N] uniforms in (0, 1], one per row. temperature == 0 is greedy.

    Passes over [N, V]: the row max, then exp((logits - max) / T) summed per block (the tempered policy's
    normaliser; T = 1 when greedy). Without filters the sampling distribution is that policy and reuses those
    sums; with top-k / top-p one more pass (after a sort) makes the truncated distribution's block sums.
    The returned `logprob` is log pi_T, the policy the trainer optimises (docs/methods/grpo.md#spec-temperature);
    `sampling_logprob` is log q of the truncated distribution, for truncated importance sampling.
    """
    chex.assert_rank(logits, 2)
    n = logits.shape[0]
    chex.assert_shape(u, (n,))
    logits = logits.astype(jnp.float32)
    temperature = jnp.asarray(temperature, jnp.float32)
    top_p = jnp.asarray(top_p, jnp.float32)
    top_k = jnp.asarray(top_k, jnp.int32)
    filtering = (top_k > 0) | (top_p < 1.0)
    block = block_size(logits.shape[1])
    greedy_mode = temperature <= 0.0
    t = jnp.where(greedy_mode, 1.0, temperature)  # the policy whose log-prob is reported
    row_max = jnp.max(logits, axis=-1)
    # Dividing by a positive temperature keeps the order, so max(logits / T) == row_max / T exactly and the most
    # likely token survives every filter.
    scaled_max = (row_max / t)[:, None]
    # The total is the last running sum, not a sum of the block sums: XLA would fold that into a second
    # full-width reduction over the logits.
    policy_cdf = jnp.cumsum(_block_sums(jnp.exp(logits / t - scaled_max), block), axis=-1)
    policy_lse = scaled_max[:, 0] + jnp.log(policy_cdf[:, -1])

    def greedy(_):
        return jnp.argmax(logits, axis=-1).astype(jnp.int32), jnp.zeros((n,), jnp.float32)

    def sampled(_):
        thresh = jax.lax.cond(filtering, lambda: keep_threshold(logits, top_k, top_p, t),
                              lambda: jnp.full((n, 1), NEG_INF))

        def weight(lg):  # unnormalised sampling probability; unfiltered it is the policy's own summand exactly
            return jnp.where(lg >= thresh, jnp.exp(lg / t - scaled_max), 0.0)

        block_cdf = jax.lax.cond(filtering, lambda: jnp.cumsum(_block_sums(weight(logits), block), axis=-1),
                                 lambda: policy_cdf)
        token, total = _inverse_cdf(logits, weight, block_cdf, u, block)
        tok_scaled = jnp.take_along_axis(logits, token[:, None], axis=1)[:, 0] / t
        return token, tok_scaled - scaled_max[:, 0] - jnp.log(total)

    token, logq = jax.lax.cond(greedy_mode, greedy, sampled, None)
    logp = jnp.take_along_axis(logits, token[:, None], axis=1)[:, 0] / t - policy_lse
    return StepSample(token, logp, logq)


def sample_step(logits: jax.Array, key: jax.Array, temperature, top_p, top_k) -> StepSample:
    """logits: [N, V] (any float dtype). temperature == 0 means greedy."""
    u = 1.0 - jax.random.uniform(key, (logits.shape[0],), jnp.float32)  # (0, 1]
    return sample_with_uniform(logits, u, temperature, top_p, top_k)
