"""Value-free RL on solve rollouts: GRPO, Dr. GRPO, RLOO, REINFORCE++ (by estimator name), DAPO (by knobs)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.rl.batch import TokenBatch, build_token_batch
from jaxrl_reason.rl.losses import TermSpec, kl_spec, pg_spec


@dataclasses.dataclass
class PolicyLossConfig:
    """The PPO-clip solve term and its KL penalty."""

    aggregation: str = "seq_mean_token_mean"  # token_mean (DAPO) | seq_mean_token_mean (GRPO) | seq_mean_token_sum_norm
    max_len: Optional[int] = None  # fixed length for seq_mean_token_sum_norm (default: max_new_tokens)
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: Optional[float] = None
    beta: float = 0.0  # KL-to-reference coefficient; 0 skips the reference forward entirely
    kl_estimator: str = "k3"

    def terms(self, tasks=("solve",)) -> tuple[TermSpec, ...]:
        t = [pg_spec(tasks, aggregation=self.aggregation, max_len=self.max_len, eps_low=self.eps_low,
                     eps_high=self.eps_high, dual_clip=self.dual_clip)]
        if self.beta:
            t.append(kl_spec(tasks, beta=self.beta, estimator=self.kl_estimator))
        return tuple(t)


def group_advantages(rewards: np.ndarray, estimator: str, **kwargs) -> np.ndarray:
    """[Q, G] rewards -> [Q, G] advantages with the named estimator (see rl.advantages.ESTIMATORS)."""
    return np.asarray(adv_lib.compute_advantages(estimator, np.asarray(rewards, np.float32), **kwargs))


def solve_rows(rollouts: Rollouts, advantages: np.ndarray, *, pad_id: int, task: str = "solve") -> TokenBatch:
    g = rollouts.group_size
    prompts = [rollouts.prompts[r // g] for r in range(len(rollouts.completions))]
    return build_token_batch(prompts, rollouts.completions, list(np.asarray(advantages).reshape(-1)),
                             rollouts.logprobs, task, pad_id=pad_id)


class GRPO:
    """Solve rows with group advantages; the building block every other method extends."""

    name = "grpo"
    # Whether the method trains on groups whose rewards are all equal (CURE replays into zero-pass groups), so
    # that DAPO's dynamic sampling, which drops them, must be refused.
    uses_zero_signal_groups = False

    def __init__(self, estimator: str = "grpo", loss: PolicyLossConfig = PolicyLossConfig(), **estimator_kwargs):
        if estimator not in adv_lib.ESTIMATORS:
            raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {sorted(adv_lib.ESTIMATORS)}")
        self.estimator = estimator
        self.estimator_kwargs = estimator_kwargs
        self.loss = loss

    def terms(self) -> tuple[TermSpec, ...]:
        return self.loss.terms(("solve",))

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        a = group_advantages(rollouts.rewards, self.estimator, **self.estimator_kwargs)
        metrics = {f"solve/{k}": v for k, v in adv_lib.group_metrics(rollouts.rewards, advantages=a).items()}
        return solve_rows(rollouts, a, pad_id=ctx.pad_id), metrics

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, d: dict) -> None:
        pass
