"""On-policy distillation: a teacher scores the policy's own samples, and the per-token reverse KL to it is the
learning signal, added to any method's advantages.

For a sampled token y_t ~ pi(. | x, y_<t), d_t = log pi_T(y_t | ...) - log pi_old(y_t | ...) is minus the
single-sample (k1) estimate of the per-token reverse KL, KL(pi || pi_T). Its score-function gradient,
E[(log pi - log pi_T) grad log pi], is the gradient of the sequence-level reverse KL when each token is credited
with its own d_t only (no sum over later tokens: the discount-0 choice of Agarwal et al.'s GKD and of Thinking
Machines' on-policy distillation, which keeps the variance low). So the signal enters as a per-token *advantage*,

    A_t = rl_coef * A_t(method) + coef * d_t,

trained by whatever policy loss the config selects (PPO-clip, GSPO, CISPO, ...): one loss term, the teacher
nowhere in the update's jit. This is what SkyRL's teacher-distillation example and Tinker's on-policy
distillation do (student advantages = teacher log-prob minus student log-prob); TRL's GKDTrainer and tunix's
distillation instead put a divergence over the full next-token distributions in the *loss*, which needs the
teacher's logits (a [B, T, V] tensor) inside the update. The advantage form needs only one log-prob per sampled
token from the teacher, composes with every policy loss and every method's rows, and is exact for what it
estimates; its price is a sampled (higher-variance) estimate of the KL instead of the full-vocabulary one.

The teacher is any loadable checkpoint -- an HF directory, a GGUF file, or an in-memory model -- with the
student's vocabulary (same tokenizer). It is scored at the sampling temperature, so d_t compares the two
tempered distributions the student's log pi_old comes from.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np

from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.rl.batch import TokenBatch, pad_rows_to, task_id
from jaxrl_reason.rl.losses import TermSpec


@dataclasses.dataclass
class DistillConfig:
    """The `method.distill` section: on-policy distillation from a teacher (off while `teacher` is empty)."""

    teacher: str = ""  # the teacher: an HF checkpoint directory or a .gguf file, same vocabulary as the policy
    coef: float = 1.0  # weight of the per-token signal log pi_T - log pi_old added to the advantages
    rl_coef: float = 1.0  # weight of the method's own advantages (0 = pure on-policy distillation)
    tasks: str = "solve"  # comma-separated tasks whose sampled rows get the signal
    dtype: str = "float32"  # the teacher's parameter dtype when loaded
    rows_per_call: int = 32  # rows per teacher forward pass

    def __post_init__(self):
        if self.coef < 0 or self.rl_coef < 0:
            raise ValueError(f"config method.distill.coef / rl_coef must be >= 0, got {self.coef}, {self.rl_coef}")
        if self.rows_per_call < 1:
            raise ValueError(f"config method.distill.rows_per_call must be >= 1, got {self.rows_per_call}")
        if not self.task_names:
            raise ValueError("config method.distill.tasks names no task; e.g. 'solve'")

    @property
    def task_names(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.tasks.split(",") if t.strip())

    @property
    def enabled(self) -> bool:
        return bool(self.teacher)


def load_teacher(source, dtype: str = "float32"):
    """A teacher model from an HF directory, a .gguf file, or a model object (returned as it is)."""
    if not isinstance(source, str):
        return source
    if source.endswith(".gguf"):
        from jaxrl_reason.models.gguf_port import load_gguf

        return load_gguf(source, dtype=dtype)[0]
    from jaxrl_reason.models.hf_port import load_pretrained

    return load_pretrained(source, dtype=dtype)


def teacher_signal(batch: TokenBatch, teacher, task_ids, *, temperature: float = 1.0,
                   rows_per_call: int = 32) -> np.ndarray:
    """float32 [B, T]: log pi_T - log pi_old on the trained tokens of rows of `task_ids`, 0 elsewhere."""
    from flax import nnx

    from jaxrl_reason.rl.scoring import reference_logprobs

    graphdef, params = nnx.split(teacher)
    n = batch.batch_size
    out = np.zeros(batch.tokens.shape, np.float32)
    for s in range(0, n, rows_per_call):
        sub = pad_rows_to(jax.tree.map(lambda x: np.asarray(x)[s:s + rows_per_call], batch), rows_per_call)
        lp = np.asarray(reference_logprobs(graphdef, params, sub, temperature=float(temperature)))
        out[s:s + rows_per_call] = lp[:min(rows_per_call, n - s)]
    rows = np.isin(np.asarray(batch.task_id), np.asarray(task_ids, np.int32))
    on = (np.asarray(batch.loss_mask) != 0) & rows[:, None]
    return np.where(on, out - np.asarray(batch.old_logprobs), 0.0).astype(np.float32)


class Distilled:
    """`method` with on-policy distillation folded into its advantages (see the module docstring). Everything
    else -- terms, tasks, state -- is the wrapped method's."""

    def __init__(self, method, config: DistillConfig, teacher: Any = None):
        self.method, self.config = method, config
        self._teacher = teacher  # an in-memory model, or loaded from config.teacher on first use
        for t in config.task_names:
            task_id(t)  # a clear error for an unknown task before any rollout
        self.name = f"{method.name}+distill"

    def __getattr__(self, key):  # tasks, uses_zero_signal_groups, critic, ... are the wrapped method's
        return getattr(self.__dict__["method"], key)

    @property
    def teacher(self):
        if self._teacher is None:
            self._teacher = load_teacher(self.config.teacher, self.config.dtype)
        return self._teacher

    def terms(self) -> tuple[TermSpec, ...]:
        return self.method.terms()

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        batch, metrics = self.method.build(rollouts, ctx)
        teacher = self.teacher
        if ctx.model is not None and teacher.config.vocab_size != ctx.model.config.vocab_size:
            raise ValueError(f"distillation teacher has vocabulary {teacher.config.vocab_size}, the policy "
                             f"{ctx.model.config.vocab_size}; the teacher must share the policy's tokenizer")
        ids = [task_id(t) for t in self.config.task_names]
        d = teacher_signal(batch, teacher, ids, temperature=ctx.temperature, rows_per_call=self.config.rows_per_call)
        rows = np.isin(np.asarray(batch.task_id), np.asarray(ids, np.int32))[:, None]
        on = (np.asarray(batch.loss_mask) != 0) & rows
        adv = np.asarray(batch.advantages, np.float32)
        adv = np.where(rows, self.config.rl_coef * adv, adv) + self.config.coef * d
        n = max(int(on.sum()), 1)
        metrics = {**metrics, "distill/reverse_kl": float(-d[on].sum() / n),
                   "distill/teacher_logprob": float((d + np.asarray(batch.old_logprobs))[on].sum() / n)}
        return batch._replace(advantages=adv.astype(np.float32)), metrics

    def state_dict(self) -> dict:
        return self.method.state_dict()

    def load_state_dict(self, d: dict) -> None:
        self.method.load_state_dict(d)


def with_distillation(method, config: Optional[DistillConfig], teacher: Any = None):
    """`method` unchanged when distillation is off (no teacher in config or argument), else `Distilled`."""
    if teacher is None and (config is None or not config.enabled):
        return method
    return Distilled(method, config or DistillConfig(), teacher)
