"""PPO with a learned value (docs/methods/ppo.md#spec): a value head on the policy's final hidden state or a separate
critic model (`critic="separate"`, `models.qwen2.attach_critic`), GAE, whitening, and the clipped value loss as one more
term of the fused update.

Per step: the current params score V(s_t) for every completion token (the state that emits token t: the hidden
state that predicts it), once, before any update -- the values GAE uses and the value clip is centred on, as the
sampler's log-probs are pi_old. The reward is sparse: the sequence reward on the last completion token, 0
elsewhere, and the value after the last token is 0 (`rl.gae.gae`). Advantages are GAE(gamma, lambda), whitened
over the batch's completion tokens (`whiten`), and go on the solve rows for the PPO-clip term; the returns
R = A + V_old (before whitening) and V_old go on value rows, copies of the solve rows trained only by the
"value" term (`rl.gae.value_spec`, weight `value_coef`). Choices and how they differ from verl and TRL:
docs/methods/ppo.md. `PPOV` is PPO^V: RL^V's verify rows on top.
"""
from __future__ import annotations

import functools
import time
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_reason.buckets import power_of_two
from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, shaped_rewards, solve_rows
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.models.qwen2 import CRITIC_INITS, attach_critic, attach_value_head
from jaxrl_reason.rl.batch import TokenBatch, build_token_batch, concat_batches
from jaxrl_reason.rl.gae import VALUE_TASK, WHITENING, gae, value_spec, whiten
from jaxrl_reason.rl.losses import TermSpec
from jaxrl_reason.rl.overlong import truncated_mask
from jaxrl_reason.parallel.mesh import to_host
from jaxrl_reason.rl.scoring import align_to_targets, model_values, rows_on_mesh

# ----------------------------------------------------------------------------------------------------------------
# Values of sampled completions under given params


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _row_values(graphdef, params, batch: TokenBatch) -> jax.Array:
    return align_to_targets(model_values(nnx.merge(graphdef, params), batch))


def completion_values(model, params, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *,
                      pad_id: int = 0, rows_per_call: int = 32) -> list[np.ndarray]:
    """V(s_t) for every completion token t (the state before it, read where its log-prob is): float32
    [len(completion)] per row, under `params` (None: the module's own). One forward per `rows_per_call` rows,
    padded to a power of two of rows and a length bucket so few shapes compile."""
    if len(prompts) != len(completions):
        raise ValueError(f"completion_values got {len(prompts)} prompts and {len(completions)} completions")
    if getattr(model, "value_source", None) is None:
        raise ValueError("completion_values: the model has no critic (models.qwen2.attach_value_head or "
                         "attach_critic)")
    graphdef, own = nnx.split(model)
    params = own if params is None else params
    out = []
    for s in range(0, len(prompts), rows_per_call):
        p, c = prompts[s:s + rows_per_call], completions[s:s + rows_per_call]
        batch = build_token_batch(p, c, [0.0] * len(p), None, "solve", pad_id=pad_id)
        batch, mesh = rows_on_mesh(batch, params, min(rows_per_call, power_of_two(len(p), 1)))
        with jax.set_mesh(mesh):
            v = to_host(_row_values(graphdef, params, batch))
        out.extend(v[i, len(pi):len(pi) + len(ci)].astype(np.float32) for i, (pi, ci) in enumerate(zip(p, c)))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Sparse rewards -> GAE advantages and value targets (pure, host side)


@functools.partial(jax.jit, static_argnames=("gamma", "lam", "mode"))
def _gae_whitened(rewards, values, mask, *, gamma, lam, mode):
    out = gae(rewards, values, mask, gamma=gamma, lam=lam)
    return whiten(out.advantages, mask, mode), out.advantages, out.returns


def ppo_advantages(values: Sequence[np.ndarray], rewards: Sequence[float], *, gamma: float = 1.0, lam: float = 1.0,
                   whitening: str = "masked_batch") -> tuple[list, list, dict]:
    """Per completion: float32 [length] GAE advantages (whitened over every completion token of the batch) and
    returns R = A + V (the value targets, before whitening), with the sequence reward on the last token.

    values: one float32 [length] per completion (V(s_t) before token t); rewards: one scalar per completion."""
    if len(values) != len(rewards):
        raise ValueError(f"ppo_advantages: {len(values)} value rows but {len(rewards)} rewards")
    lengths = [len(v) for v in values]
    n, width = len(values), power_of_two(max(lengths + [1]), 8)  # a few compiled widths
    v = np.zeros((n, width), np.float32)
    r = np.zeros((n, width), np.float32)
    m = np.zeros((n, width), np.float32)
    for i, (vi, L) in enumerate(zip(values, lengths)):
        v[i, :L], m[i, :L] = vi, 1.0
        if L:
            r[i, L - 1] = rewards[i]
    adv_w, adv, ret = (np.asarray(x) for x in _gae_whitened(jnp.asarray(r), jnp.asarray(v), jnp.asarray(m),
                                                            gamma=float(gamma), lam=float(lam), mode=whitening))
    tok = m > 0
    stats = {"ppo/adv_mean": float(adv[tok].mean()) if tok.any() else 0.0,
             "ppo/adv_std": float(adv[tok].std()) if tok.any() else 0.0,
             "ppo/return_mean": float(ret[tok].mean()) if tok.any() else 0.0,
             "ppo/old_value_mean": float(v[tok].mean()) if tok.any() else 0.0,
             "ppo/old_value_explained_variance": _explained_variance(ret[tok], v[tok])}
    return ([adv_w[i, :L].copy() for i, L in enumerate(lengths)], [ret[i, :L].copy() for i, L in enumerate(lengths)],
            stats)


def _explained_variance(returns: np.ndarray, values: np.ndarray) -> float:
    var = float(np.var(returns)) if returns.size else 0.0
    return 1.0 - float(np.var(returns - values)) / var if var > 1e-8 else 0.0


# ----------------------------------------------------------------------------------------------------------------
# The methods

CRITICS = ("head", "separate")


class PPO(GRPO):
    """Solve rows with GAE advantages from the policy's value head, plus value rows for the clipped value loss."""

    name = "ppo"
    tasks = ("solve", VALUE_TASK)
    trains_tool_rows = False
    no_tool_rows = ("its critic's values and GAE run over every completion token, the environment's included; "
                    "multi-turn GAE (over model tokens, across environment turns) is not built")

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, *, gamma: float = 1.0,
                 lam: float = 1.0, whiten: str = "masked_batch", value_coef: float = 0.1, value_clip: float = 0.2,
                 value_rows_per_call: int = 32, critic: str = "head", critic_init: str = "policy",
                 critic_lr_scale: float = 1.0, **estimator_kwargs):
        """gamma, lam: GAE's discount and lambda (1, 1: A_t = R - V(s_t), the Monte-Carlo return against the
        learned baseline); whiten: none | batch | masked_batch (rl.gae.whiten, over the step's completion tokens);
        value_coef: weight of the value loss in the one objective; value_clip: V stays within V_old +- this in
        the clipped loss; value_rows_per_call: rows per forward when scoring V_old.
        critic: "head" (a value head on the policy's trunk) | "separate" (a critic model of the policy's
        architecture, verl's and TRL's setup); the trainer attaches it. critic_init: "policy" (the separate
        critic starts from the policy's weights) | "random". critic_lr_scale: the separate critic's learning rate
        relative to the policy's (verl's critic default is 10x its actor's). The advantage `estimator` is not used
        (GAE replaces it)."""
        super().__init__(estimator, loss)
        if critic not in CRITICS:
            raise ValueError(f"ppo critic={critic!r} is unknown; choose one of {CRITICS}")
        if critic_init not in CRITIC_INITS:
            raise ValueError(f"ppo critic_init={critic_init!r} is unknown; choose one of {CRITIC_INITS}")
        if critic_lr_scale <= 0:
            raise ValueError(f"ppo critic_lr_scale must be > 0, got {critic_lr_scale}")
        if critic == "head" and (critic_init != "policy" or critic_lr_scale != 1.0):
            raise ValueError("ppo critic_init and critic_lr_scale apply to critic='separate' only; the shared head "
                             "starts at zero and trains at the policy's rate")
        self.critic, self.critic_init, self.critic_lr_scale = critic, critic_init, float(critic_lr_scale)
        if estimator_kwargs:
            raise ValueError(f"ppo computes its advantages by GAE; estimator keywords {sorted(estimator_kwargs)} "
                             "would be ignored: drop them")
        if not 0.0 <= gamma <= 1.0 or not 0.0 <= lam <= 1.0:
            raise ValueError(f"ppo gamma={gamma}, lam={lam}: both must lie in [0, 1]")
        if whiten not in WHITENING:
            raise ValueError(f"ppo whiten={whiten!r} is unknown; choose one of {WHITENING}")
        if value_coef < 0:
            raise ValueError(f"ppo value_coef must be >= 0, got {value_coef}")
        self.gamma, self.lam, self.whiten = float(gamma), float(lam), whiten
        self.value_coef, self.value_clip = float(value_coef), float(value_clip)
        self.value_rows_per_call = int(value_rows_per_call)
        value_spec(clip_eps=self.value_clip)  # refuses a bad clip at construction, not at the first step

    def prepare(self, model, seed: int) -> None:
        if self.critic == "head":
            # The critic shares the policy's trunk: a zero value head joins the param tree (in place, so whoever
            # holds the module -- a pipeline evaluating or saving it -- sees the trainer's structure), and is then
            # trained, checkpointed and restored with the policy. The HF save drops it unless asked.
            attach_value_head(model)
        else:
            # A critic model of its own, in the same param tree, that only the value loss trains; its learning rate
            # and gradient clip are its own (train.state.make_optimizer).
            attach_critic(model, init=self.critic_init, seed=seed)

    def terms(self) -> tuple[TermSpec, ...]:
        return super().terms() + (value_spec((VALUE_TASK,), weight=self.value_coef, clip_eps=self.value_clip),)

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        if ctx.model is None or getattr(ctx.model, "value_source", None) is None:
            raise ValueError("ppo needs a critic on the policy in Context.model (the Trainer attaches one; else "
                             "models.qwen2.attach_value_head or attach_critic)")
        rewards, metrics = shaped_rewards(rollouts, self.loss, ctx.max_new_tokens)
        g, n = rollouts.group_size, len(rollouts.completions)
        prompts = [rollouts.prompts[r // g] for r in range(n)]
        t0 = time.perf_counter()
        old_values = completion_values(ctx.model, ctx.params, prompts, rollouts.completions, pad_id=ctx.pad_id,
                                       rows_per_call=self.value_rows_per_call)
        adv, returns, stats = ppo_advantages(old_values, rewards.reshape(-1), gamma=self.gamma, lam=self.lam,
                                             whitening=self.whiten)
        metrics.update(stats)
        metrics["ppo/value_seconds"] = time.perf_counter() - t0
        solve, row_metrics = solve_rows(rollouts, adv, self.loss, pad_id=ctx.pad_id)
        masks = None
        if self.loss.overlong_filter:  # the value is not fitted to what the policy loss leaves out either
            truncated = truncated_mask(rollouts.finish)
            masks = [np.full(len(c), 0.0 if t else 1.0, np.float32) for c, t in zip(rollouts.completions, truncated)]
        value = build_token_batch(prompts, rollouts.completions, returns, old_values, VALUE_TASK, pad_id=ctx.pad_id,
                                  completion_masks=masks)
        return concat_batches([solve, value]), {**metrics, **row_metrics}


class PPOV(RLV, PPO):
    """PPO^V: PPO's solve and value rows plus RL^V's verify rows in one update (MRO: RLV -> PPO -> GRPO)."""

    name = "ppo_v"
    tasks = ("solve", VALUE_TASK, "verify")
