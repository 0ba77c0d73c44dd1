"""Pure, jit-able pieces of PPO with a learned critic: GAE, advantage whitening and the clipped value loss.

Shapes are `[batch, time]`; `mask` marks the trained (completion) tokens. Nothing here knows about a model: the
trainer (not yet wired) feeds per-token values `V [B, T]` from a value head and per-token rewards `r [B, T]`
(for RLVR: the sequence reward on the last completion token, zero elsewhere).
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_reason.rl.losses import LossTerm, aggregate

WHITENING = ("none", "batch", "masked_batch")


class GAEOutput(NamedTuple):
    """advantages: float32 [B, T] (0 outside mask); returns: float32 [B, T] = advantages + values (value targets)."""

    advantages: jax.Array
    returns: jax.Array


def gae(rewards: jax.Array, values: jax.Array, mask: jax.Array, *, gamma: float = 1.0, lam: float = 1.0
        ) -> GAEOutput:
    """Generalised advantage estimation over [B, T], scanning time backwards.

    Masked-out positions are skipped, not treated as episode ends: the next value and the running GAE carry
    across them, so left/right padding or a prompt span inside a row does not cut the trajectory. The value after
    the last masked token is 0 (the episode ends there).
    """
    chex.assert_rank([rewards, values, mask], 2)
    chex.assert_equal_shape([rewards, values, mask])
    m = mask.astype(jnp.float32)
    r = rewards.astype(jnp.float32) * m
    v = values.astype(jnp.float32) * m

    def step(carry, x):
        next_value, running = carry
        r_t, v_t, m_t = x
        delta = r_t + gamma * next_value - v_t
        adv_t = delta + gamma * lam * running
        # Outside the mask the carry passes through unchanged.
        next_value = jnp.where(m_t > 0, v_t, next_value)
        running = jnp.where(m_t > 0, adv_t, running)
        return (next_value, running), jnp.where(m_t > 0, adv_t, 0.0)

    B = rewards.shape[0]
    init = (jnp.zeros((B,), jnp.float32), jnp.zeros((B,), jnp.float32))
    xs = (r.T[::-1], v.T[::-1], m.T[::-1])
    _, adv_rev = jax.lax.scan(step, init, xs)
    adv = adv_rev[::-1].T
    return GAEOutput(advantages=adv, returns=(adv + v) * m)


def whiten(advantages: jax.Array, mask: jax.Array, mode: str = "masked_batch", eps: float = 1e-8) -> jax.Array:
    """none: unchanged; batch: mean/std over every [B, T] entry; masked_batch: mean/std over masked tokens only.

    The result is zeroed outside the mask in every mode, so padding never carries an advantage."""
    chex.assert_equal_shape([advantages, mask])
    m = mask.astype(jnp.float32)
    a = advantages.astype(jnp.float32)
    if mode == "none":
        return a * m
    if mode == "batch":
        return (a - a.mean()) / (a.std() + eps) * m
    if mode == "masked_batch":
        n = jnp.maximum(m.sum(), 1.0)
        mean = (a * m).sum() / n
        var = (((a - mean) ** 2) * m).sum() / n
        return (a - mean) / (jnp.sqrt(var) + eps) * m
    raise ValueError(f"whitening mode {mode!r} unknown; choose one of {WHITENING}")


def clipped_value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array, mask: jax.Array,
                       segment_ids: jax.Array, *, clip_eps: float = 0.2, aggregation: str = "token_mean"
                       ) -> tuple[LossTerm, dict[str, jax.Array]]:
    """0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2), aggregated like the policy terms.

    Returns LossTerm(num, den) so micro-batches sum exactly (rl/losses.py), plus token-mean stats."""
    chex.assert_equal_shape([values, old_values, returns, mask, segment_ids])
    v = values.astype(jnp.float32)
    v_clip = old_values + jnp.clip(v - old_values, -clip_eps, clip_eps)
    unclipped = (v - returns) ** 2
    clipped = (v_clip - returns) ** 2
    per_token = 0.5 * jnp.maximum(unclipped, clipped)
    m = mask.astype(jnp.float32)
    n = jnp.maximum(m.sum(), 1.0)
    stats = {"value/clip_frac": ((clipped > unclipped).astype(jnp.float32) * m).sum() / n,
             "value/mse": (unclipped * m).sum() / n}
    return aggregate(per_token, mask, segment_ids, aggregation), stats
