"""Value-free advantage estimators over groups of sampled responses, and group-level filtering.

Every estimator is a pure function `rewards [queries, group] -> advantages [queries, group]` with an optional
`valid [queries, group]` bool mask. Groups may have different sizes (CURE replay enlarges some; a padded slot is
just `valid = False`): invalid slots get advantage 0 and never enter a mean or a standard deviation. A group with
fewer than two valid members, or whose valid rewards are all equal, carries no learning signal and gets 0.

The estimators are written with `jnp` and jit-able (string options are static). DAPO's dynamic sampling, which
must call the sampler again, lives in the trainer and asks `zero_signal_groups` which groups to drop.
"""
from __future__ import annotations

import functools
from typing import Callable

import chex
import jax
import jax.numpy as jnp

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
    """bool [Q, 1]: >= 2 valid members whose rewards are not all equal (`zero_signal_groups` negated). Decided
    exactly, not from the std, because rounding in the mean leaves ~1e-8 deviations that a std of the same size
    would inflate."""
    return ~_zero_signal(rewards, valid, 0.0)[:, None]


def _zero_signal(rewards, valid, atol):
    hi = jnp.where(valid, rewards, -jnp.inf).max(axis=1)
    lo = jnp.where(valid, rewards, jnp.inf).min(axis=1)
    return (valid.sum(axis=1) < 2) | (hi - lo <= atol)


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
    return _zero_signal(*_prepare(rewards, valid), atol)


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
