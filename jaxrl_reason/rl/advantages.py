"""Value-free advantage estimators over groups of sampled responses, and group-level filtering.

Every estimator is a pure function `rewards [queries, group] -> advantages [queries, group]` with an optional
`valid [queries, group]` bool mask. Groups may have different sizes (CURE replay enlarges some; a padded slot is
just `valid = False`): invalid slots get advantage 0 and never enter a mean or a standard deviation. A group with
fewer than two valid members, or whose valid rewards are all equal, carries no learning signal and gets 0.

The estimators are written with `jnp` and jit-able (string options are static); the dynamic-sampling helpers at
the bottom are host-side numpy, because refilling means calling the sampler again.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

Estimator = Callable[..., jax.Array]


def _prepare(rewards, valid):
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [queries, group], got shape {rewards.shape}")
    if valid is None:
        valid = jnp.ones(rewards.shape, bool)
    else:
        valid = jnp.asarray(valid)
        if valid.shape != rewards.shape:
            raise ValueError(f"valid has shape {valid.shape} but rewards has {rewards.shape}; they must match")
        valid = valid.astype(bool)
    # Invalid slots may hold anything (NaN from a crashed verifier, padding); zero them before any sum.
    rewards = jnp.where(valid, rewards, 0.0)
    return rewards, valid


def _signal(rewards, valid):
    """bool [Q, 1]: >= 2 valid members whose rewards are not all equal. Decided exactly, not from the std,
    because rounding in the mean leaves ~1e-8 deviations that a std of the same size would inflate."""
    hi = jnp.where(valid, rewards, -jnp.inf).max(axis=1, keepdims=True)
    lo = jnp.where(valid, rewards, jnp.inf).min(axis=1, keepdims=True)
    return (valid.sum(axis=1, keepdims=True) >= 2) & (hi > lo)


def _group_stats(rewards, valid, ddof):
    n = valid.sum(axis=1, keepdims=True).astype(jnp.float32)
    mean = rewards.sum(axis=1, keepdims=True) / jnp.maximum(n, 1.0)
    dev = jnp.where(valid & _signal(rewards, valid), rewards - mean, 0.0)
    var = (dev**2).sum(axis=1, keepdims=True) / jnp.maximum(n - ddof, 1.0)
    return n, mean, dev, jnp.sqrt(var)


def _batch_std(values, valid, ddof):
    n = valid.sum().astype(jnp.float32)
    mean = jnp.where(valid, values, 0.0).sum() / jnp.maximum(n, 1.0)
    var = (jnp.where(valid, values - mean, 0.0) ** 2).sum() / jnp.maximum(n - ddof, 1.0)
    return mean, jnp.sqrt(var)


@functools.partial(jax.jit, static_argnames=("scale", "ddof"))
def grpo(rewards, valid=None, *, scale: str = "group", eps: float = 1e-6, ddof: int = 1) -> jax.Array:
    """Group-relative advantage `(r_i - mean_g r) / (std + eps)`.

    scale: "group" — std of the group's valid rewards (GRPO);
           "batch" — one std over all valid rewards of the batch (group mean, batch std);
           "none"  — no division, mean-centred only (Dr. GRPO).
    ddof:  1 (default) gives the unbiased sample std, matching verl/TRL, whose GRPO the CURE code forks;
           0 gives the population std.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"grpo: scale must be 'group', 'batch' or 'none', got {scale!r}")
    rewards, valid = _prepare(rewards, valid)
    n, mean, dev, std = _group_stats(rewards, valid, ddof)
    if scale == "group":
        adv = dev / (std + eps)
    elif scale == "batch":
        _, bstd = _batch_std(rewards, valid, ddof)
        adv = dev / (bstd + eps)
    else:
        adv = dev
    return adv  # dev, hence adv, is already 0 on invalid slots and zero-signal groups


@jax.jit
def rloo(rewards, valid=None) -> jax.Array:
    """Leave-one-out baseline: `A_i = r_i - mean_{j != i, valid} r_j`; 0 for groups with < 2 valid members."""
    rewards, valid = _prepare(rewards, valid)
    n, _, dev, _ = _group_stats(rewards, valid, 0)
    # r_i - (S - r_i) / (n - 1) == n / (n - 1) * (r_i - mean): the same centring as grpo, rescaled.
    return dev * n / jnp.maximum(n - 1.0, 1.0)


@functools.partial(jax.jit, static_argnames=("ddof",))
def reinforce_pp(rewards, valid=None, *, eps: float = 1e-6, ddof: int = 1) -> jax.Array:
    """REINFORCE++-baseline: subtract the group mean, then whiten the centred values over the whole batch.

    Differs from `grpo(scale="batch")` in that the std is that of the centred advantages (within-group spread),
    not of the raw rewards.
    """
    rewards, valid = _prepare(rewards, valid)
    _, _, dev, _ = _group_stats(rewards, valid, ddof)
    # [choice] Whiten over the slots that carry signal: zero-signal groups (dev = 0) would shrink the std and
    # so inflate every advantage by an amount that depends on how many groups happened to be degenerate.
    use = valid & _signal(rewards, valid)
    mean, std = _batch_std(dev, use, ddof)
    return jnp.where(use, (dev - mean) / (std + eps), 0.0)


ESTIMATORS: dict[str, Estimator] = {
    "grpo": grpo,
    "dr_grpo": functools.partial(grpo, scale="none"),
    "grpo_batch_std": functools.partial(grpo, scale="batch"),
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
}


def get_estimator(name: str, **kwargs) -> Estimator:
    """`ESTIMATORS[name]` with keyword options bound, e.g. `get_estimator("grpo", scale="batch")`."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {sorted(ESTIMATORS)}")
    fn = ESTIMATORS[name]
    return functools.partial(fn, **kwargs) if kwargs else fn


def compute_advantages(name: str, rewards, valid=None, **kwargs) -> jax.Array:
    return get_estimator(name, **kwargs)(rewards, valid)


# ----------------------------------------------------------------------------------------------------------------
# Signal metrics


def zero_signal_groups(rewards, valid=None, atol: float = 0.0) -> jax.Array:
    """bool [queries]: groups whose valid rewards are all equal (within atol) or that have < 2 valid members."""
    rewards, valid = _prepare(rewards, valid)
    hi = jnp.where(valid, rewards, -jnp.inf).max(axis=1)
    lo = jnp.where(valid, rewards, jnp.inf).min(axis=1)
    n = valid.sum(axis=1)
    return (n < 2) | (hi - lo <= atol)


def group_metrics(rewards, valid=None, advantages=None, *, atol: float = 0.0) -> dict[str, jax.Array]:
    """Scalars for logging: reward mean/std, zero-signal group count and fraction, mean group size, and (if
    given) the mean |advantage| over valid slots. Queries with no valid slot at all count as zero-signal."""
    chex.assert_rank(jnp.asarray(rewards), 2)
    r, v = _prepare(rewards, valid)
    nv = v.sum().astype(jnp.float32)
    mean, std = _batch_std(r, v, 0)
    zero = zero_signal_groups(rewards, valid, atol)
    q = r.shape[0]
    out = {
        "reward_mean": mean,
        "reward_std": std,
        "num_groups": jnp.asarray(q, jnp.float32),
        "zero_signal_groups": zero.sum().astype(jnp.float32),
        "zero_signal_frac": zero.mean(),
        "group_size_mean": nv / q,
    }
    if advantages is not None:
        a = jnp.asarray(advantages, jnp.float32)
        chex.assert_equal_shape([a, r])
        out["advantage_abs_mean"] = jnp.where(v, jnp.abs(a), 0.0).sum() / jnp.maximum(nv, 1.0)
    return out


# ----------------------------------------------------------------------------------------------------------------
# DAPO dynamic sampling (host side, numpy)


def informative_groups(rewards, valid=None, atol: float = 0.0) -> np.ndarray:
    """bool [queries]: True for groups that carry signal (at least two valid rewards that differ)."""
    rewards = np.asarray(rewards, np.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [queries, group], got shape {rewards.shape}")
    valid = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid, bool)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid has shape {valid.shape} but rewards has {rewards.shape}; they must match")
    hi = np.where(valid, rewards, -np.inf).max(axis=1)
    lo = np.where(valid, rewards, np.inf).min(axis=1)
    return (valid.sum(axis=1) >= 2) & (hi - lo > atol)


class RefillPlan(NamedTuple):
    """Where each of the batch's group slots comes from after a refill.

    source:    int8 [queries] — 0: keep the batch's own group at `index`, 1: take pool group `index`.
    index:     int64 [queries] — row into the batch (source 0) or into the pool (source 1).
    missing:   zero-signal slots the pool could not replace (they keep their original group); when > 0 the
               trainer samples more groups and calls `refill` again on the result of `apply_refill`.
    pool_used: how many pool groups were taken (the first informative ones, in pool order).
    """

    source: np.ndarray
    index: np.ndarray
    missing: int
    pool_used: int


def refill(rewards, valid, pool_rewards, pool_valid=None, *, atol: float = 0.0) -> RefillPlan:
    """Replaces zero-signal groups of a batch by informative groups from a pool of extra groups.

    rewards, valid:           [queries, group] of the current batch (valid may be None).
    pool_rewards, pool_valid: [pool, group] of freshly sampled extra groups (same group width; pad with
                              valid=False). Zero-signal pool groups are skipped.
    Informative batch groups stay in place, so the result keeps the batch's order where it can.
    """
    rewards = np.asarray(rewards, np.float32)
    pool_rewards = np.asarray(pool_rewards, np.float32)
    if pool_rewards.ndim != 2 or (pool_rewards.size and pool_rewards.shape[1] != rewards.shape[1]):
        raise ValueError(
            f"pool_rewards has shape {pool_rewards.shape} but the batch groups are {rewards.shape}; the pool must "
            "be [pool, group] with the same group width (pad with pool_valid=False)"
        )
    keep = informative_groups(rewards, valid, atol)
    q = rewards.shape[0]
    source = np.zeros((q,), np.int8)
    index = np.arange(q, dtype=np.int64)
    if pool_rewards.shape[0]:
        donors = np.flatnonzero(informative_groups(pool_rewards, pool_valid, atol))
    else:
        donors = np.zeros((0,), np.int64)
    holes = np.flatnonzero(~keep)
    used = min(len(holes), len(donors))
    source[holes[:used]] = 1
    index[holes[:used]] = donors[:used]
    return RefillPlan(source=source, index=index, missing=int(len(holes) - used), pool_used=int(used))


def apply_refill(plan: RefillPlan, batch_values, pool_values) -> np.ndarray:
    """Gathers any per-group array ([queries, ...] from the batch, [pool, ...] from the pool) by the plan."""
    batch_values = np.asarray(batch_values)
    pool_values = np.asarray(pool_values)
    if batch_values.shape[0] != plan.source.shape[0]:
        raise ValueError(f"batch_values has {batch_values.shape[0]} groups, the plan has {plan.source.shape[0]}")
    if batch_values.shape[1:] != pool_values.shape[1:] and pool_values.shape[0]:
        raise ValueError(f"batch_values {batch_values.shape} and pool_values {pool_values.shape} differ after axis 0")
    out = batch_values.copy()
    take = plan.source == 1
    if np.any(take):
        out[take] = pool_values[plan.index[take]]
    return out
