"""Optimizer construction and the (pure) training state."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_reason.parallel.mesh import replicated
from jaxrl_reason.parallel.rules import put


class TrainState(NamedTuple):
    """Everything a step reads and writes, so a run can stop anywhere and resume exactly.

    step:      [] int32, optimizer steps done (RL steps, each may hold `num_iterations` updates)
    params:    nnx.State of the policy's parameters
    opt_state: optax state
    key:       PRNG key (uint32[2]) threaded through sampling
    """

    step: jax.Array
    params: Any
    opt_state: Any
    key: jax.Array


def learning_rate_schedule(lr: float, *, total_steps: int, warmup_steps: int = 0, schedule: str = "constant",
                           final_lr_frac: float = 0.1) -> optax.Schedule:
    """Linear warm-up, then constant or cosine decay to `final_lr_frac * lr` at `total_steps`."""
    if lr <= 0:
        raise ValueError(f"learning rate must be positive, got {lr}")
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
    warm = optax.linear_schedule(0.0 if warmup_steps else lr, lr, max(warmup_steps, 1))
    if schedule == "constant":
        rest = optax.constant_schedule(lr)
    else:
        rest = optax.cosine_decay_schedule(lr, max(total_steps - warmup_steps, 1), alpha=final_lr_frac)
    return optax.join_schedules([warm, rest], [warmup_steps]) if warmup_steps else rest


def _decay_mask(params):
    # Decay matrices only (kernels and the embedding), never norms or biases. Stacked layers carry a leading
    # [layers] axis, so rank alone cannot tell a norm from a matrix: use the parameter's name.
    def mask(path, _):
        name = str(getattr(path[-1], "key", path[-1]))
        parent = str(getattr(path[-2], "key", path[-2])) if len(path) > 1 else ""
        return name == "kernel" or (name == "weight" and parent == "embed_tokens")

    return jax.tree_util.tree_map_with_path(mask, params)


def _critic_labels(params):
    # "critic" for the leaves under a separate critic (models.qwen2.attach_critic), "policy" for the rest.
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "critic" if str(getattr(path[0], "key", path[0])) == "critic" else "policy", params)


def _critic_mask(params):
    return jax.tree.map(lambda label: label == "critic", _critic_labels(params))


def make_optimizer(lr: float, *, total_steps: int, warmup_steps: int = 0, schedule: str = "constant",
                   weight_decay: float = 0.0, clip_norm: float = 1.0, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, critic_lr_scale: Optional[float] = None) -> optax.GradientTransformation:
    """AdamW with global-norm clipping (clip_norm <= 0 disables it) and a warm-up/decay schedule.

    critic_lr_scale: for params holding a separate critic (PPO, `attach_critic`): the critic's gradient is
    clipped by its own global norm and its step is scaled by this, as verl and TRL give the critic its own
    optimizer (the same schedule shape). None: one group."""
    sched = learning_rate_schedule(lr, total_steps=total_steps, warmup_steps=warmup_steps, schedule=schedule)
    parts = []
    if clip_norm and clip_norm > 0:
        clip = optax.clip_by_global_norm(clip_norm)
        parts.append(clip if critic_lr_scale is None else
                     optax.multi_transform({"policy": clip, "critic": optax.clip_by_global_norm(clip_norm)},
                                           _critic_labels))
    parts.append(optax.adamw(sched, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=_decay_mask))
    if critic_lr_scale is not None and critic_lr_scale != 1.0:
        parts.append(optax.masked(optax.scale(float(critic_lr_scale)), _critic_mask))
    return optax.chain(*parts)


def replicated_value(x, mesh) -> jax.Array:
    """A small host-side value (step, PRNG key) as one identical copy on every device of `mesh`, so that Orbax
    saves it once and every process reads the same value."""
    return put(np.asarray(jax.device_get(x)), replicated(mesh))


def init_state(params, opt_state, seed: int, mesh) -> TrainState:
    """Step 0 with the PRNG key of `seed`; params and opt_state as placed by `train.update.start_training`."""
    return TrainState(replicated_value(jnp.zeros((), jnp.int32), mesh), params, opt_state,
                      replicated_value(jax.random.PRNGKey(seed), mesh))
