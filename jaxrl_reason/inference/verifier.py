"""The RL^V generative verifier (docs/methods/rlv.md#spec-test-time): a solution's score is the model's probability of
answering "Yes".

    s(x, y) = pi("Yes" | render(verify_prompt(x, y)))

read off the logits of the last prompt position by one batched prefill — no generation. The rendering of a
verification row lives here once (`verify_prompts` / `verify_rows`) and is shared by test-time scoring and the
trainer's verify loss, so the token the loss teaches is exactly the token `score` reads.

[choice, `check_tokens` > 0; docs/tasks/testbed.md] A worked check: the verifier first writes, greedily, the
check its verify rows taught (data.verify_format="worked_check" / "mark_check": one line per constraint group),
and the score is P("Yes") read where it would write the verdict. For a from-scratch model a verdict over a whole
solution in one forward pass is the hard part; written out line by line each decision is local.

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


def verify_inputs(model: Qwen2, tokenizer, questions: Sequence[str], solutions: Sequence[str], *,
                  check_tokens: int = 0, batch_size: int = 32, state=None) -> list:
    """Token ids the verdict is read after: each rendered verification prompt, followed (check_tokens > 0) by the
    check the model writes greedily from it, cut before its first verdict token or stop token, at most
    `check_tokens` long."""
    prompts = verify_prompts(tokenizer, questions, solutions)
    if check_tokens < 0:
        raise ValueError(f"check_tokens must be >= 0 (0: the verdict right after the prompt), got {check_tokens}")
    if not check_tokens:
        return prompts
    import jax

    from jaxrl_reason.sampling.sampler import sample

    ids = verdict_ids(tokenizer)
    ends = {ids.yes, ids.no, *tokenizer.stop_ids}
    out = []
    for start in range(0, len(prompts), batch_size):
        # Greedy decoding ignores the key; the check is a deterministic function of the prompt.
        o = sample(model, prompts[start:start + batch_size], jax.random.PRNGKey(0), max_new_tokens=check_tokens,
                   temperature=0.0, stop_token_ids=sorted(ends), pad_id=tokenizer.pad_id, state=state)
        for p, c in zip(prompts[start:start + batch_size], o.completions()):
            c = list(c)
            out.append(list(p) + (c[:-1] if c and c[-1] in ends else c))
    return out


def verdict_logprobs(model: Qwen2, tokenizer, questions: Sequence[str], solutions: Sequence[str], *,
                     batch_size: int = 32, state=None, max_length: Optional[int] = None,
                     progress: Optional[Callable[[int, int], None]] = None, check_tokens: int = 0,
                     inputs: Optional[list] = None) -> np.ndarray:
    """[N, 2] float32: log P("Yes"), log P("No") as the first reply token after each verification prompt, or with
    `check_tokens` > 0 after the check the model writes first (`verify_inputs`; pass its result as `inputs` to
    reuse it)."""
    ids = verdict_ids(tokenizer)
    if inputs is None:
        inputs = verify_inputs(model, tokenizer, questions, solutions, check_tokens=check_tokens,
                               batch_size=batch_size, state=state)
    elif len(inputs) != len(solutions):
        raise ValueError(f"verdict_logprobs: {len(inputs)} inputs for {len(solutions)} solutions")
    return token_logprobs_at_end(model, inputs, [ids.yes, ids.no], batch_size=batch_size, pad_id=tokenizer.pad_id,
                                 state=state, max_length=max_length, progress=progress)


def verifier_accuracy(model, tokenizer, questions, solutions, labels, *, params=None, check_tokens: int = 0) -> dict:
    """Accuracy of "P(Yes) > P(No)" on positives and negatives separately, and their mean (balanced); with
    `check_tokens` > 0 read after the check the model writes first (`verify_inputs`)."""
    labels = np.asarray(labels, bool)
    lp = verdict_logprobs(model, tokenizer, list(questions), list(solutions), state=params,
                          check_tokens=check_tokens)
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
          progress: Optional[Callable[[int, int], None]] = None, check_tokens: int = 0) -> np.ndarray:
    """Verifier scores float32 [N] of solution i to question i: P("Yes" | verify prompt)
    (docs/methods/rlv.md#spec-test-time), or with `normalize=True` P(Yes) / (P(Yes) + P(No)) [choice], which ignores
    mass on other tokens.

    One jitted prefill per batch of `batch_size` rows; `state` overrides the model's parameters (e.g. the
    trainer's latest). For an LLM-as-a-judge baseline pass a model that was not trained to verify. `check_tokens`
    > 0: the model first writes a worked check of at most that many tokens (greedy; `verify_inputs`).
    """
    lp = verdict_logprobs(model, tokenizer, questions, solutions, batch_size=batch_size, state=state,
                          max_length=max_length, progress=progress, check_tokens=check_tokens)
    return scores_from_logprobs(lp, normalize=normalize)
