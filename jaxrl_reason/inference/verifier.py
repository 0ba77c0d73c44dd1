"""The RL^V generative verifier (METHODS §2): a solution's score is the model's probability of answering "Yes".

    s(x, y) = pi("Yes" | render(verify_prompt(x, y)))

read off the logits of the last prompt position by one batched prefill — no generation. The rendering of a
verification row lives here once (`verify_prompts` / `verify_rows`) and is shared by test-time scoring and the
trainer's verify loss, so the token the loss teaches is exactly the token `score` reads.

LLM-as-a-judge baseline: the paper's judge for a base RL model is this very call on a model that was not trained
to verify (same prompt, P(Yes) as the score, no verification chain of thought). Pass that model to `score`.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from jaxrl_reason.data.prompts import VERIFY_NO, VERIFY_YES, verify_prompt
from jaxrl_reason.models.qwen2 import Qwen2
from jaxrl_reason.rl.scoring import token_logprobs_at_end


class VerdictIds(NamedTuple):
    """Token ids of the two verdicts as the first token of the assistant's reply."""

    yes: int
    no: int


class VerifyRows(NamedTuple):
    """Verification examples ready for a next-token loss on one token.

    prompts: [N] token-id lists of the rendered `verify_prompt(question, solution)`, ending where the reply starts
    targets: int32 [N], `ids.yes` where the label is correct, else `ids.no`
    ids:     the verdict ids
    """

    prompts: list
    targets: np.ndarray
    ids: VerdictIds


def verdict_ids(tokenizer) -> VerdictIds:
    """The "Yes" / "No" ids at the start of a reply; raises when either word is not a single token there."""
    yes, no = tokenizer.single_token_id(VERIFY_YES), tokenizer.single_token_id(VERIFY_NO)
    if yes == no:
        raise ValueError(f"{VERIFY_YES!r} and {VERIFY_NO!r} map to the same token id {yes}; the verifier needs two "
                         "distinct verdict tokens")
    return VerdictIds(yes, no)


def verify_prompts(tokenizer, questions: Sequence[str], solutions: Sequence[str]) -> list:
    """Token ids of each rendered verification prompt (chat template applied, ending at the reply's start)."""
    if isinstance(questions, str) or isinstance(solutions, str):
        raise TypeError("verify_prompts takes sequences of questions and solutions, got a single str; wrap it in a "
                        "list")
    if len(questions) != len(solutions):
        raise ValueError(f"verify_prompts got {len(questions)} questions but {len(solutions)} solutions; pass one "
                         "question per solution (repeat each question N times for N samples)")
    texts = [tokenizer.render_prompt(verify_prompt(q, s)) for q, s in zip(questions, solutions)]
    return tokenizer.encode_ragged(texts)


def verify_rows(tokenizer, questions: Sequence[str], solutions: Sequence[str], labels: Sequence) -> VerifyRows:
    """Verification rows for the trainer's verify term: prompt ids and the target verdict id per row.

    labels: [N] correctness of each solution (bool, or a 0/1 reward; > 0.5 counts as correct).
    """
    labels = np.asarray(labels)
    if labels.shape != (len(solutions),):
        raise ValueError(f"verify_rows: labels must have shape [{len(solutions)}] (one per solution), got "
                         f"{labels.shape}")
    ids = verdict_ids(tokenizer)
    prompts = verify_prompts(tokenizer, questions, solutions)
    targets = np.where(labels.astype(np.float64) > 0.5, ids.yes, ids.no).astype(np.int32)
    return VerifyRows(prompts, targets, ids)


def verdict_logprobs(model: Qwen2, tokenizer, questions: Sequence[str], solutions: Sequence[str], *,
                     batch_size: int = 32, state=None, max_length: Optional[int] = None,
                     progress: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
    """[N, 2] float32: log P("Yes"), log P("No") as the first reply token after each verification prompt."""
    ids = verdict_ids(tokenizer)
    prompts = verify_prompts(tokenizer, questions, solutions)
    return token_logprobs_at_end(model, prompts, [ids.yes, ids.no], batch_size=batch_size, pad_id=tokenizer.pad_id,
                                 state=state, max_length=max_length, progress=progress)


def verifier_accuracy(model, tokenizer, questions, solutions, labels, *, params=None) -> dict:
    """Accuracy of "P(Yes) > P(No)" on positives and negatives separately, and their mean (balanced)."""
    labels = np.asarray(labels, bool)
    lp = verdict_logprobs(model, tokenizer, list(questions), list(solutions), state=params)
    says_yes = lp[:, 0] > lp[:, 1]
    pos = float(says_yes[labels].mean()) if labels.any() else float("nan")
    neg = float((~says_yes[~labels]).mean()) if (~labels).any() else float("nan")
    return {"acc_positive": pos, "acc_negative": neg, "balanced_acc": 0.5 * (pos + neg),
            "p_yes_mean": float(np.exp(lp[:, 0]).mean()), "rows": int(len(labels))}


def scores_from_logprobs(logprobs: np.ndarray, *, normalize: bool = False) -> np.ndarray:
    """[N, 2] (log P(Yes), log P(No)) -> [N] scores: P(Yes), or P(Yes) / (P(Yes) + P(No)) when `normalize`."""
    lp = np.asarray(logprobs, np.float64)
    if lp.ndim != 2 or lp.shape[1] != 2:
        raise ValueError(f"expected [N, 2] (log P(Yes), log P(No)), got shape {lp.shape}")
    if normalize:
        # P(Yes)/(P(Yes)+P(No)) = sigmoid(log P(Yes) - log P(No)): stable even when both are tiny.
        return (1.0 / (1.0 + np.exp(lp[:, 1] - lp[:, 0]))).astype(np.float32)
    return np.exp(lp[:, 0]).astype(np.float32)


def score(model: Qwen2, tokenizer, questions: Sequence[str], solutions: Sequence[str], *, normalize: bool = False,
          batch_size: int = 32, state=None, max_length: Optional[int] = None,
          progress: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
    """Verifier scores float32 [N] of solution i to question i: P("Yes" | verify prompt) (METHODS §2), or with
    `normalize=True` P(Yes) / (P(Yes) + P(No)) [choice], which ignores mass on other tokens.

    One jitted prefill per batch of `batch_size` rows; `state` overrides the model's parameters (e.g. the
    trainer's latest). For an LLM-as-a-judge baseline pass a model that was not trained to verify.
    """
    lp = verdict_logprobs(model, tokenizer, questions, solutions, batch_size=batch_size, state=state,
                          max_length=max_length, progress=progress)
    return scores_from_logprobs(lp, normalize=normalize)
