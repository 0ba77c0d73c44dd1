"""RL^V: the policy is also a generative verifier, trained on the RL batch's own (question, solution, reward).

    J = J_RL + lambda * J_verify,   J_verify = mean log pi("Yes" | verify_prompt(x, y)) if r = 1 else "No"

The verify rows are built from the same rollouts (no extra generation), class-balanced by subsampling the
majority class (docs/methods/rlv.md#spec-training [choice]; `balance="none"` keeps every row), and trained by the SFT
term in the same jitted update as the RL term. Any advantage estimator works: GRPO^V, RLOO^V, Dr.GRPO^V are this class
with another `estimator`.

Before training on them, the current policy scores the batch's verify prompts (one prefill, last position
only), which gives the verifier's accuracy on positives and negatives separately, on samples it has not yet
been trained on.

[choice, not in the paper] The paper starts from an instruct/math LLM that can already answer the verify
question. A policy warmed up only on worked solutions cannot (P("Yes") ~ 3e-5), and the cold verify term then
swamps the RL gradient under clipping; `train/verify_warmup.py` (config `sft.verify_steps`) first teaches the
verdict on the policy's own reward-labelled samples. Compare RL^V and its baseline from the same warmed-up model.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from jaxrl_reason.inference.verifier import verifier_accuracy, verify_rows
from jaxrl_reason.methods.base import Context, Rollouts, join_rows
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.rl.batch import TokenBatch, build_token_batch
from jaxrl_reason.rl.losses import TermSpec, sft_spec


def balanced_indices(labels: np.ndarray, rng: np.random.Generator, *, balance: str = "subsample",
                     max_rows: int = 0, groups: Optional[np.ndarray] = None) -> np.ndarray:
    """Row indices for the verify task.

    subsample: equal numbers of positives and negatives over the batch (the majority class subsampled at random;
      none at all if a class is empty);
    per_question: equal numbers of positives and negatives *within each question* (`groups[i]` = question id of
      row i; questions whose samples are all right or all wrong give no rows). Batch-level balance leaves the
      question itself predictive of the label -- a verifier can score how hard the question looks and ignore the
      solution (measured on the CPU default: 90% balanced accuracy, within-question AUROC 0.47); within a question the label can only
      come from the solution, which is what Best-of-N and weighted voting need;
    none: every row. max_rows caps the total."""
    labels = np.asarray(labels, bool)
    if balance == "none":
        idx = np.arange(len(labels))
    elif balance == "subsample":
        pos, neg = np.nonzero(labels)[0], np.nonzero(~labels)[0]
        n = min(len(pos), len(neg))
        idx = np.concatenate([rng.permutation(pos)[:n], rng.permutation(neg)[:n]])
    elif balance == "per_question":
        if groups is None or np.shape(groups) != labels.shape:
            raise ValueError(f"rlv balance='per_question' needs groups (one question id per row, shape "
                             f"{labels.shape}), got {None if groups is None else np.shape(groups)}")
        groups = np.asarray(groups)
        parts = []
        for g in np.unique(groups):
            rows = np.nonzero(groups == g)[0]
            pos, neg = rows[labels[rows]], rows[~labels[rows]]
            n = min(len(pos), len(neg))
            parts += [rng.permutation(pos)[:n], rng.permutation(neg)[:n]]
        idx = np.concatenate(parts) if parts else np.zeros((0,), np.int64)
    else:
        raise ValueError(f"rlv balance={balance!r} is unknown; use 'subsample', 'per_question' or 'none'")
    if max_rows and len(idx) > max_rows:
        idx = rng.permutation(idx)[:max_rows]
    return np.sort(idx).astype(np.int64)


def worked_check_targets(tokenizer, verify_target, questions, solutions, rows) -> list:
    """Token ids of each row's worked-check target; its last token must be the verdict the reward gives (the id
    the scorer reads after the check), else the data's check and the reward disagree."""
    out = []
    for q, s, verdict in zip(questions, solutions, rows.targets):
        ids = tokenizer.encode(verify_target(q, s))
        if not ids or ids[-1] != int(verdict):
            raise ValueError(f"verify_target's text must end in the reward's verdict as its own token (id "
                             f"{int(verdict)}), got {ids[-3:]}: the task's check and its reward disagree, or the "
                             "verdict merges with the text before it")
        out.append(ids)
    return out


class RLV(GRPO):
    name = "rlv"
    tasks = ("solve", "verify")
    part = "verify"
    # Tool rows: the solve rows are GRPO's; a verify row poses the question and the transcript the reward graded
    # (the model's turns, calls included, ending in the final answer the verdict is about).
    trains_tool_rows = True

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, *,
                 verify_weight: float = 1.0, balance: str = "subsample", max_verify_rows: int = 0,
                 measure_verifier: bool = True, **estimator_kwargs):
        """verify_weight: lambda; balance: "subsample" | "per_question" | "none" (see `balanced_indices`);
        max_verify_rows: cap per step (0 = none); measure_verifier: score the verify prompts before the update to
        log accuracy on positives/negatives (also at verify_weight 0, where no verify row is trained: the lambda = 0
        baseline of a sweep)."""
        super().__init__(estimator, loss, **estimator_kwargs)
        if verify_weight < 0:
            raise ValueError(f"rlv verify_weight (lambda) must be >= 0, got {verify_weight}")
        self.verify_weight, self.balance = float(verify_weight), balance
        self.max_verify_rows, self.measure_verifier = int(max_verify_rows), measure_verifier

    def terms(self) -> tuple[TermSpec, ...]:
        if not self.verify_weight:  # lambda = 0: no verify rows, no term
            return super().terms()
        return super().terms() + (sft_spec(("verify",), name="verify", weight=self.verify_weight),)

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        solve, metrics = super().build(rollouts, ctx)
        if not self.verify_weight and not (self.measure_verifier and ctx.model is not None):
            return solve, metrics  # the part is off and nothing is measured: no rows
        ctx = self.part_context(ctx, "verify")
        g = rollouts.group_size
        labels = rollouts.rewards.reshape(-1) > 0.5
        idx = balanced_indices(labels, ctx.rng, balance=self.balance, max_rows=self.max_verify_rows,
                               groups=np.arange(len(labels)) // g)
        if self.verify_weight:
            metrics["verify/rows"] = len(idx)
            metrics["verify/positive_frac"] = float(labels[idx].mean()) if len(idx) else 0.0
        if len(idx) == 0:
            return solve, metrics
        questions = [rollouts.examples[i // g].question for i in idx]
        solutions = [rollouts.texts[i] for i in idx]
        rows = verify_rows(ctx.tokenizer, questions, solutions, labels[idx])
        if ctx.formats.verify_target is None:
            targets = [[int(t)] for t in rows.targets]
        else:  # a worked check, then the verdict: the whole target is trained
            targets = worked_check_targets(ctx.tokenizer, ctx.formats.verify_target, questions, solutions, rows)
        if self.measure_verifier and ctx.model is not None:
            acc = verifier_accuracy(ctx.model, ctx.tokenizer, questions, solutions, labels[idx], params=ctx.params,
                                    check_tokens=max(map(len, targets)) - 1)
            metrics.update({f"verify/{k}": acc[k] for k in ("acc_positive", "acc_negative", "balanced_acc")})
        if not self.verify_weight:  # lambda = 0: the verifier is measured (the sweep's baseline), not trained
            return solve, metrics
        verify = build_token_batch(rows.prompts, targets, [0.0] * len(idx), None, "verify", pad_id=ctx.pad_id)
        return join_rows([solve, verify]), metrics
