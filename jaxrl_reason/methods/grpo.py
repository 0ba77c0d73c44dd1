"""Value-free RL on solve rollouts: GRPO, Dr. GRPO, RLOO, REINFORCE++ (by estimator name), DAPO (by knobs)."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import numpy as np

from jaxrl_reason.knobs import check_known
from jaxrl_reason.methods.base import Context, Rollouts, part_context
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.rl.batch import TokenBatch, build_token_batch, register_task
from jaxrl_reason.rl.importance import check_tis, truncated_is_weights
from jaxrl_reason.rl.overlong import check_overlong, overlong_penalty, truncated_mask
from jaxrl_reason.rl.losses import TermSpec, kl_spec
from jaxrl_reason.rl.policy_losses import POLICY_LOSSES, VERL_NAMES, policy_loss_knobs, policy_spec


@dataclasses.dataclass
class PolicyLossConfig:
    """The policy-loss term of sampled rows (PPO-clip by default, or any loss of `rl.policy_losses`), its KL
    penalty, and the corrections applied to sampled solve rows."""

    policy_loss: str = "ppo_clip"  # ppo_clip | gspo | sapo | gpg | clip_cov | kl_cov | geo_mean | cispo | dppo_tv | dppo_kl | dro
    policy_loss_kwargs: Mapping = dataclasses.field(default_factory=dict)  # that loss's own knobs (rl.policy_losses.policy_loss_knobs), e.g. {"eps_high": 4e-4}
    aggregation: str = "seq_mean_token_mean"  # token_mean (DAPO) | seq_mean_token_mean (GRPO) | seq_mean_token_sum_norm
    max_len: Optional[int] = None  # fixed length for seq_mean_token_sum_norm (default: max_new_tokens)
    eps_low: float = 0.2  # PPO clip below 1: the ratio is clipped at 1 - eps_low
    eps_high: float = 0.2  # PPO clip above 1 (clip-higher when > eps_low)
    dual_clip: Optional[float] = None  # dual-clip constant for negative advantages (None / 0 = off)
    beta: float = 0.0  # KL-to-reference coefficient; 0 skips the reference forward entirely
    kl_estimator: str = "k3"  # k1 | k2 | k3
    tis: str = "off"  # truncated importance sampling min(pi_old / q, tis_cap): off | token | sequence
    tis_cap: float = 2.0  # the cap C of the TIS weight
    overlong_buffer: int = 0  # DAPO's L_cache: penalise the last this-many tokens before the limit (0 = off)
    overlong_penalty: float = 1.0  # DAPO's overlong penalty at the length limit (reward - this)
    overlong_filter: bool = False  # DAPO: truncated samples are masked out of the loss

    def __post_init__(self):
        check_tis(self.tis, self.tis_cap)
        check_overlong(self.overlong_buffer, self.overlong_penalty)
        self.policy_loss = VERL_NAMES.get(self.policy_loss, self.policy_loss)
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(f"config method.policy_loss={self.policy_loss!r} is unknown; available: "
                             f"{list(POLICY_LOSSES)}")
        self.policy_loss_kwargs = dict(self.policy_loss_kwargs or {})
        check_known("method.policy_loss_kwargs", self.policy_loss_kwargs, policy_loss_knobs(self.policy_loss),
                    what=f"policy loss {self.policy_loss!r}" + (
                        "; PPO-clip's knobs are method.eps_low / eps_high / dual_clip"
                        if self.policy_loss == "ppo_clip" else ""))
        if self.policy_loss != "ppo_clip":
            base = PolicyLossConfig.__dataclass_fields__
            moved = [k for k in ("eps_low", "eps_high", "dual_clip") if getattr(self, k) != base[k].default]
            if moved:
                raise ValueError(f"config method.{moved[0]} is PPO-clip's knob, but method.policy_loss="
                                 f"{self.policy_loss!r}; set method.policy_loss_kwargs.<knob> instead (its knobs: "
                                 f"{sorted(policy_loss_knobs(self.policy_loss)) or 'none'})")

    def policy_term(self, tasks, *, name: str = "pg", weight: float = 1.0) -> TermSpec:
        """The policy-loss term over `tasks`' rows, in this config's aggregation."""
        knobs = (dict(eps_low=self.eps_low, eps_high=self.eps_high, dual_clip=self.dual_clip)
                 if self.policy_loss == "ppo_clip" else self.policy_loss_kwargs)
        return policy_spec(self.policy_loss, tasks, name=name, weight=weight, aggregation=self.aggregation,
                           max_len=self.max_len, **knobs)

    def terms(self, tasks=("solve",), *, name: str = "pg", kl_name: str = "kl",
              weight: float = 1.0) -> tuple[TermSpec, ...]:
        """The loss of sampled rows of `tasks`: the policy term `name` at `weight`, and with beta > 0 the KL term
        `kl_name` at beta * weight in the same aggregation. Every method expands a task's loss here."""
        t = [self.policy_term(tasks, name=name, weight=weight)]
        if self.beta:
            # Inside the same per-sequence mean as the policy term (the GRPO objective; verl and TRL alike).
            t.append(kl_spec(tasks, beta=self.beta * weight, estimator=self.kl_estimator, name=kl_name,
                             aggregation=self.aggregation, max_len=self.max_len))
        return tuple(t)


def group_advantages(rewards: np.ndarray, estimator: str, **kwargs) -> np.ndarray:
    """[Q, G] rewards -> [Q, G] advantages with the named estimator (see rl.advantages.ESTIMATORS)."""
    return np.asarray(adv_lib.compute_advantages(estimator, np.asarray(rewards, np.float32), **kwargs))


def solve_rows(rollouts: Rollouts, advantages: np.ndarray, loss: PolicyLossConfig, *, pad_id: int,
               task: str = "solve") -> tuple[TokenBatch, dict]:
    """The rollouts as `task` rows with [Q, G] advantages (or a list of float32 [completion length] per-token
    advantages, one per row: VinePPO), and metrics, with `loss`'s sampled-row corrections: truncated importance
    weights folded into per-token advantages (`rl.importance`), DAPO's overlong filter."""
    g = rollouts.group_size
    n = len(rollouts.completions)
    prompts = [rollouts.prompts[r // g] for r in range(n)]
    if isinstance(advantages, (list, tuple)):
        if len(advantages) != n or any(len(a) != len(c) for a, c in zip(advantages, rollouts.completions)):
            raise ValueError("solve_rows: per-token advantages need one array per completion, of its length")
        adv = [np.asarray(a, np.float32) for a in advantages]
    else:
        adv = list(np.asarray(advantages, np.float32).reshape(-1))
    metrics: dict = {}
    if rollouts.sampling_logprobs is not None:
        weights, metrics = truncated_is_weights(rollouts.logprobs, rollouts.sampling_logprobs, mode=loss.tis,
                                                cap=loss.tis_cap)
        if loss.tis != "off":
            adv = [a * w for a, w in zip(adv, weights)]
    elif loss.tis != "off":
        raise ValueError(f"tis={loss.tis!r} needs the sampler's log q of every sampled token "
                         "(Rollouts.sampling_logprobs), which these rollouts do not carry; set tis='off'")
    # Environment tokens of multi-turn rows (tool observations) carry no loss and no pi_old.
    masks = None if rollouts.token_masks is None else [np.asarray(m, np.float32) for m in rollouts.token_masks]
    if loss.overlong_filter:
        truncated = truncated_mask(rollouts.finish)
        keep = [np.full(len(c), 0.0 if t else 1.0, np.float32) for c, t in zip(rollouts.completions, truncated)]
        masks = keep if masks is None else [m * k for m, k in zip(masks, keep)]
        metrics["overlong/filtered_frac"] = float(truncated.mean())
    batch = build_token_batch(prompts, rollouts.completions, adv, rollouts.logprobs, task, pad_id=pad_id,
                              completion_masks=masks)
    return batch, metrics


def shaped_rewards(rollouts: Rollouts, loss: PolicyLossConfig, max_new_tokens: int) -> tuple[np.ndarray, dict]:
    """[Q, G] rewards after DAPO's overlong shaping (unchanged when `loss.overlong_buffer` is 0), and metrics."""
    rewards = np.asarray(rollouts.rewards, np.float32)
    if not loss.overlong_buffer:
        return rewards, {}
    if max_new_tokens <= 0:
        raise ValueError("overlong_buffer needs the generation limit: the method's Context.max_new_tokens is unset")
    pen = overlong_penalty([len(c) for c in rollouts.completions], max_new_tokens, loss.overlong_buffer,
                           loss.overlong_penalty).reshape(rewards.shape)
    return rewards + pen, {"overlong/penalised_frac": float((pen < 0).mean()),
                           "overlong/penalty_mean": float(pen.mean())}


class GRPO:
    """Solve rows with group advantages; the building block every other method extends."""

    name = "grpo"
    # The tasks whose rows the method builds; registered when the class is defined, so rows and terms of a new
    # task work in any order (`rl.batch.register_task`).
    tasks: tuple[str, ...] = ("solve",)
    # Whether the method trains on groups whose rewards are all equal (CURE replays into zero-pass groups), so
    # that DAPO's dynamic sampling, which drops them, must be refused.
    uses_zero_signal_groups = False
    # Whether this class's `build` trains on multi-turn tool rows (`Rollouts.token_masks`): declared by every class
    # that defines a `build`, on that class alone; `tool_rows_refusal` reads the whole MRO, so a subclass whose
    # new `build` says nothing is refused with tools rather than trained on environment tokens untested.
    trains_tool_rows = True

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for t in cls.tasks:
            register_task(t)

    # The loss the method trains when its config sets none (`loss=None`): a method brings its paper's loss, so
    # `method.name=cure` on a config written for GRPO trains CURE's, not GRPO's (`methods.method_loss`).
    default_loss = PolicyLossConfig()

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, **estimator_kwargs):
        if estimator not in adv_lib.ESTIMATORS:
            raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {sorted(adv_lib.ESTIMATORS)}")
        self.estimator = estimator
        self.estimator_kwargs = estimator_kwargs
        self.loss = self.default_loss if loss is None else loss

    # What the method trains beside the policy: None | "head" | "separate" (PPO's critic, attached by `prepare`).
    critic: Optional[str] = None

    # The self-checking part a class adds to the solve rows ("verify", "critique", "correct"), declared on that
    # class alone; a class whose MRO holds more than one is a union (`parts`).
    part: Optional[str] = None

    @classmethod
    def parts(cls) -> tuple[str, ...]:
        """The parts along the MRO, outermost first (RLV: ("verify",); CIPOV: ("correct", "verify"))."""
        return tuple(dict.fromkeys(c.__dict__["part"] for c in cls.__mro__ if c.__dict__.get("part")))

    @classmethod
    def tool_rows_refusal(cls) -> Optional[str]:
        """None when every `build` along the MRO declares `trains_tool_rows = True` in its own class; else why the
        first that does not cannot train multi-turn tool rows (its `no_tool_rows` text, when it gives one)."""
        for c in cls.__mro__:
            if "build" in c.__dict__ and c.__dict__.get("trains_tool_rows") is not True:
                why = c.__dict__.get("no_tool_rows") or "its build does not declare trains_tool_rows = True"
                return f"{c.__name__}.build: {why}"
        return None

    def part_context(self, ctx: Context, part: str) -> Context:
        """The Context a part builds its rows with: in a union, the part's own randomness and sampler stream
        (`methods.base.part_context`), so that the batch does not depend on the order of the union's classes;
        a method of one part uses `ctx` as it is."""
        return part_context(ctx, part) if len(self.parts()) > 1 else ctx

    def check(self, config, task, tokenizer) -> None:
        """Start-up hook: fails before any training when the method cannot run on the run's typed `config`
        (experiment.config.RunConfig), its data `task` (experiment.data.TaskData) under this `tokenizer`, naming the
        knob and the fix (e.g. CURE's critique budget against the task's critiques). Solve rows need nothing."""

    def prepare(self, model, seed: int) -> None:
        """Trainer hook, before the update is built: attach to `model` (in place) what the method trains beside
        the policy (PPO's critic), seeded by `seed`. GRPO trains the policy alone."""

    def terms(self) -> tuple[TermSpec, ...]:
        return self.loss.terms(("solve",))

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        rewards, metrics = shaped_rewards(rollouts, self.loss, ctx.max_new_tokens)
        a = group_advantages(rewards, self.estimator, **self.estimator_kwargs)
        metrics.update({f"solve/{k}": v for k, v in adv_lib.group_metrics(rewards, advantages=a).items()})
        batch, row_metrics = solve_rows(rollouts, a, self.loss, pad_id=ctx.pad_id)
        return batch, {**metrics, **row_metrics}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, d: dict) -> None:
        pass
