"""Pure, jit-able pieces of PPO with a learned critic: GAE, advantage whitening and the clipped value loss.

Shapes are `[batch, time]`; `mask` marks the trained (completion) tokens. Nothing here knows about a model:
`methods.ppo` feeds per-token values `V [B, T]` from the value head (`models.qwen2.ValueHead`) and per-token
rewards `r [B, T]` (for RLVR: the sequence reward on the last completion token, zero elsewhere), and the fused
update (`train.update`) passes the values under the trained params to the registered "value" term.
"""
from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from jaxrl_reason.rl.losses import LossTerm, TermSpec, aggregate, register_term_kind, term_spec

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


def clipped_value_per_token(values: jax.Array, old_values: jax.Array, returns: jax.Array, *, clip_eps: float = 0.2
                            ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2), the unclipped (V - R)^2, whether the
    clipped branch is the larger) per token. The clip keeps one update's values near the ones GAE used."""
    chex.assert_equal_shape([values, old_values, returns])
    v = values.astype(jnp.float32)
    v_clip = old_values + jnp.clip(v - old_values, -clip_eps, clip_eps)
    unclipped = (v - returns) ** 2
    clipped = (v_clip - returns) ** 2
    return 0.5 * jnp.maximum(unclipped, clipped), unclipped, clipped > unclipped


def clipped_value_loss(values: jax.Array, old_values: jax.Array, returns: jax.Array, mask: jax.Array,
                       segment_ids: jax.Array, *, clip_eps: float = 0.2, aggregation: str = "token_mean"
                       ) -> tuple[LossTerm, dict[str, jax.Array]]:
    """0.5 * max((V - R)^2, (clip(V, V_old - eps, V_old + eps) - R)^2), aggregated like the policy terms.

    Returns LossTerm(num, den) so micro-batches sum exactly (rl/losses.py), plus token-mean stats."""
    chex.assert_equal_shape([values, old_values, returns, mask, segment_ids])
    per_token, unclipped, clipped = clipped_value_per_token(values, old_values, returns, clip_eps=clip_eps)
    m = mask.astype(jnp.float32)
    n = jnp.maximum(m.sum(), 1.0)
    stats = {"value/clip_frac": (clipped.astype(jnp.float32) * m).sum() / n,
             "value/mse": (unclipped * m).sum() / n}
    return aggregate(per_token, mask, segment_ids, aggregation), stats


# ----------------------------------------------------------------------------------------------------------------
# The value loss as a term of the fused update

# Value rows (task "value" by default) are copies of the solve rows whose fields hold the critic's targets:
# `advantages` = the GAE returns R, `old_logprobs` = the values V_old that GAE used. The policy's own fields
# (advantage, log pi_old) stay on the solve rows: a TokenBatch has no spare per-token field for two more
# quantities, and a task of its own is how every other target reaches the update (STYLE.md: every task is rows).
VALUE_TASK = "value"
_MOMENTS = ("ev_ret", "ev_ret_sq", "ev_err", "ev_err_sq")


def _value_kernel(logprobs, batch, mask, *, values, clip_eps=0.2):
    returns, old_values = batch.advantages, batch.old_logprobs
    per_token, unclipped, clipped = clipped_value_per_token(values, old_values, returns, clip_eps=clip_eps)
    v = jax.lax.stop_gradient(values.astype(jnp.float32))
    err = returns - v
    # Token means of these moments add up over micro-batches; `explained_variance` turns them into
    # 1 - Var(R - V) / Var(R) once the update has summed them.
    stats = {"mse": unclipped, "clip_frac": clipped.astype(jnp.float32), "pred_mean": v, "return_mean": returns,
             "ev_ret": returns, "ev_ret_sq": returns ** 2, "ev_err": err, "ev_err_sq": err ** 2}
    return per_token, stats


register_term_kind("value", _value_kernel, needs_values=True)


def value_spec(tasks=(VALUE_TASK,), *, name: str = "value", weight: float = 0.5, clip_eps: float = 0.2,
               aggregation: str = "token_mean", max_len=None) -> TermSpec:
    """PPO's clipped value loss (weight = value_coef) on value rows: metrics `loss/{name}`, `{task}/mse`,
    `{task}/clip_frac`, `{task}/explained_variance` (the last computed by `explained_variance` in the update)."""
    if clip_eps <= 0:
        raise ValueError(f"value clip_eps must be > 0 (a large value such as 1e9 turns the clip off), got {clip_eps}")
    return term_spec("value", tasks, name=name, weight=weight, aggregation=aggregation, max_len=max_len,
                     clip_eps=float(clip_eps))


def explained_variance(metrics: dict, eps: float = 1e-8) -> dict:
    """Replaces each task's summed value moments (`{task}/ev_*`) by `{task}/explained_variance` =
    1 - Var(R - V) / Var(R) over its value tokens (1: V predicts the returns; 0: no better than their mean;
    0 when the returns do not vary). Jit-able; other metrics pass through."""
    out = dict(metrics)
    for key in [k for k in metrics if k.endswith("/ev_ret")]:
        prefix = key[:-len("ev_ret")]
        r, r2, e, e2 = (out.pop(prefix + m) for m in _MOMENTS)
        var_r, var_e = r2 - r ** 2, e2 - e ** 2
        out[prefix + "explained_variance"] = jnp.where(var_r > eps, 1.0 - var_e / jnp.maximum(var_r, eps), 0.0)
    return out
