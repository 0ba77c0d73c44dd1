"""Test-time strategies (docs/methods/rlv.md#spec-test-time): pick one answer from N samples of a question, spend more
tokens wisely.

Parallel strategies, over the N samples of ONE question (answers grouped by *math equivalence*, so "0.5" and
"\\frac{1}{2}" vote together):
  majority_vote(answers)              most frequent answer class (no verifier)
  best_of_n(answers, scores)          the single highest-scored sample
  weighted_vote(answers, scores)      answer class with the largest sum of verifier scores
Each returns a `Choice`: the answer, the sample it came from, and whether it is correct.

Sequential strategies:
  select_length_by_confidence(runs, tau)   stop at the first token budget whose weighted-vote winner holds at
                                           least `tau` of the total verifier score
  budget_forcing(model, tokenizer, ...)    generate k-b tokens, cut to the last sentence, append a conclusion
                                           marker, continue to k tokens in total

Whole-dataset evaluation (sample once, score once, every strategy at every k) is `evaluate()`.

Tie rule of the direct strategies: the candidate whose first sample comes earliest wins (deterministic). The
estimators in `estimators.py` instead average over tie-breaks, which is what an expectation needs.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.inference import estimators as est
from jaxrl_reason.inference.diagnostics import best_of_n_chance, verifier_quality, vote_headroom
from jaxrl_reason.inference.verifier import scores_from_logprobs, verdict_logprobs, verify_inputs
from jaxrl_reason.rewards.math import answers_equivalent, equivalence_classes, math_reward
from jaxrl_reason.progress import CallbackBar
from jaxrl_reason.sampling.sampler import FINISH_LENGTH, FINISH_NAMES, sample

# Conclusion markers for budget forcing. Thinking models close their reasoning block; a plain chain-of-thought
# model is told to state its answer (the solve prompt already asks for \boxed{}, which it then writes).
THINK_CONCLUSION_MARKER = "</think>\n\n"
CONCLUSION_MARKER = "\n\nFinal answer: "


class Choice(NamedTuple):
    """The outcome of a strategy on one question.

    answer:   the chosen final answer (text of the chosen sample's answer), None when no sample had one
    index:    the sample it was taken from (for a vote: the first sample of the winning class), -1 if none
    class_id: the winning equivalence class, -1 if none
    correct:  whether the answer is right (from `correct` or `gold`); None when neither was given
    support:  the winner's share of the vote — count share (majority), score share (weighted), its own score
              (best-of-n)
    """

    answer: Optional[str]
    index: int
    class_id: int
    correct: Optional[bool]
    support: float


def group_answers(answers: Sequence[Optional[str]], classes: Optional[Sequence[int]] = None, *,
                  grader=None) -> np.ndarray:
    """Equivalence-class ids int64 [N] of the answers (-1 = no answer); `classes` if already computed."""
    if classes is not None:
        cls = np.asarray(classes, np.int64)
        if cls.shape != (len(answers),):
            raise ValueError(f"classes must have shape [{len(answers)}] (one id per answer), got {cls.shape}")
        return cls
    return np.asarray(equivalence_classes(list(answers), grader=grader), np.int64).reshape(len(answers))


def _check_scores(scores, n: int, name: str) -> np.ndarray:
    s = np.asarray(scores, np.float64)
    if s.shape != (n,):
        raise ValueError(f"{name}: scores must have shape [{n}] (one per sample), got {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name}: scores contain NaN or inf")
    return s


def _is_correct(answer, index, correct, gold, grader) -> Optional[bool]:
    if index < 0:
        return False if (correct is not None or gold is not None) else None
    if correct is not None:
        return bool(np.asarray(correct)[index] > 0.5)
    if gold is not None:
        return bool(answer) and answers_equivalent(gold, answer, grader=grader)
    return None


def _vote(answers, weights: np.ndarray, classes, correct, gold, grader, name: str) -> Choice:
    if correct is not None and np.asarray(correct).shape != (len(answers),):
        raise ValueError(f"{name}: correct must have one entry per answer ({len(answers)})")
    cls = group_answers(answers, classes, grader=grader)
    valid = cls >= 0
    total = float(weights.sum())
    if not valid.any():
        return Choice(None, -1, -1, _is_correct(None, -1, correct, gold, grader), 0.0)
    tally = np.bincount(cls[valid], weights=weights[valid])
    first = {int(c): int(np.flatnonzero(cls == c)[0]) for c in np.unique(cls[valid])}
    # Highest tally; among equal tallies the class that appeared first.
    best = min(first, key=lambda c: (-tally[c], first[c]))
    index = first[best]
    answer = answers[index]
    share = float(tally[best] / total) if total > 0 else 0.0
    return Choice(answer, index, best, _is_correct(answer, index, correct, gold, grader), share)


def majority_vote(answers: Sequence[Optional[str]], *, classes: Optional[Sequence[int]] = None,
                  correct: Optional[Sequence] = None, gold: Optional[str] = None, grader=None) -> Choice:
    """The most frequent answer among the N samples, grouped by math equivalence.

    answers: [N] extracted final answers (None = none); classes: precomputed class ids (skips math-verify);
    correct: [N] per-sample correctness, or gold: the reference answer, to fill `Choice.correct`.
    `support` is the winner's share of all N samples.
    """
    return _vote(answers, np.ones((len(answers),)), classes, correct, gold, grader, "majority_vote")


def weighted_vote(answers: Sequence[Optional[str]], scores: Sequence[float], *,
                  classes: Optional[Sequence[int]] = None, correct: Optional[Sequence] = None,
                  gold: Optional[str] = None, grader=None) -> Choice:
    """The answer class with the largest sum of verifier scores. `support` = that sum over the sum of all N
    scores (samples without an answer included), the confidence used by `select_length_by_confidence`."""
    s = _check_scores(scores, len(answers), "weighted_vote")
    if np.any(s < 0):
        raise ValueError("weighted_vote: scores must be >= 0 (use probabilities such as P(Yes))")
    return _vote(answers, s, classes, correct, gold, grader, "weighted_vote")


def best_of_n(answers: Sequence[Optional[str]], scores: Sequence[float], *, correct: Optional[Sequence] = None,
              gold: Optional[str] = None, grader=None) -> Choice:
    """The highest-scored sample (first one on ties). Its answer may be None — best-of-n picks a solution,
    not an answer, so a top-scored solution without an answer is simply wrong."""
    s = _check_scores(scores, len(answers), "best_of_n")
    if s.size == 0:
        raise ValueError("best_of_n: no samples")
    if correct is not None and np.asarray(correct).shape != (len(answers),):
        raise ValueError(f"best_of_n: correct must have one entry per answer ({len(answers)})")
    index = int(np.argmax(s))
    answer = answers[index] or None
    correct_value = (bool(np.asarray(correct)[index] > 0.5) if correct is not None
                     else _is_correct(answer, index if answer else -1, None, gold, grader))
    return Choice(answer, index, -1, correct_value, float(s[index]))


# ----------------------------------------------------------------------------------------------------------------
# Confidence-based length selection
# ----------------------------------------------------------------------------------------------------------------
class BudgetRun(NamedTuple):
    """The N samples of one question generated with one token budget.

    budget:  the max tokens the samples were allowed
    answers: [N] extracted answers (None = none)
    scores:  [N] verifier scores
    tokens:  tokens generated for these N samples (summed), the cost of trying this budget
    correct: optional [N] per-sample correctness
    classes: optional [N] precomputed equivalence-class ids
    """

    budget: int
    answers: Sequence[Optional[str]]
    scores: Sequence[float]
    tokens: int = 0
    correct: Optional[Sequence] = None
    classes: Optional[Sequence[int]] = None


class LengthSelection(NamedTuple):
    """run_index/budget: the budget stopped at; choice: its weighted-vote choice; confidence: the winner's share
    of the total score there; reached: whether that share met `tau` (False: every budget fell short and the
    largest was used); tokens_spent: tokens of every budget tried, up to and including the chosen one."""

    run_index: int
    budget: int
    choice: Choice
    confidence: float
    reached: bool
    tokens_spent: int


def select_length_by_confidence(runs: Sequence[BudgetRun], tau: float, *, gold: Optional[str] = None,
                                grader=None) -> LengthSelection:
    """Confidence-based length selection (RL^V §5.3, docs/methods/rlv.md#spec-test-time): try budgets in increasing
    order and stop at the first whose weighted-vote winner holds >= `tau` of the total verifier score; if none does, use
    the largest.

    Budgets are tried sequentially, so the cost is the tokens of every budget tried [choice].
    """
    if not runs:
        raise ValueError("select_length_by_confidence: give at least one BudgetRun")
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"select_length_by_confidence: tau must be in [0, 1], got {tau}")
    budgets = [int(r.budget) for r in runs]
    if budgets != sorted(budgets) or len(set(budgets)) != len(budgets):
        raise ValueError(f"select_length_by_confidence: runs must have strictly increasing budgets, got {budgets}")
    spent = 0
    for i, run in enumerate(runs):
        spent += int(run.tokens)
        choice = weighted_vote(run.answers, run.scores, classes=run.classes, correct=run.correct, gold=gold,
                               grader=grader)
        reached = choice.class_id >= 0 and choice.support >= tau
        if reached or i == len(runs) - 1:
            return LengthSelection(i, budgets[i], choice, choice.support, bool(reached), spent)
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------------------------------------------
# Budget forcing
# ----------------------------------------------------------------------------------------------------------------
def truncate_to_last_sentence(text: str) -> str:
    """`text` up to and including its last ".", or all of it when it has no "." (RL^V appendix B)."""
    cut = text.rfind(".")
    return text if cut < 0 else text[:cut + 1]


class ForcedOutput(NamedTuple):
    """Budget-forced responses, rows prompt-major (row r comes from prompt r // num_samples).

    texts:         [N] final responses: T(G0) + marker + G1 for forced rows, G0 for rows that ended by themselves
    tokens:        [N] the response's token ids, as the model was conditioned on them: G0 (with its stop token),
                   or encode(T(G0) + marker) + G1 (with G1's stop token if it ended with one)
    num_tokens:    int32 [N] len(tokens[i]); always <= budget
    forced:        bool [N] whether the row hit k - b tokens and was forced to conclude
    first_texts:   [N] G0, the first-stage generation
    finish_reason: int32 [N] of the last stage that ran (sampler FINISH_* codes)
    prompt_index:  int32 [N]
    """

    texts: list
    tokens: list
    num_tokens: np.ndarray
    forced: np.ndarray
    first_texts: list
    finish_reason: np.ndarray
    prompt_index: np.ndarray


def _strip_stop(ids: list, stop_ids) -> list:
    return ids[:-1] if ids and ids[-1] in stop_ids else ids


def budget_forcing(model, tokenizer, prompts: Sequence, key: jax.Array, *, budget: int, buffer: int,
                   marker: str = CONCLUSION_MARKER, num_samples: int = 1, temperature: float = 1.0,
                   top_p: float = 1.0, top_k: int = 0, stop_token_ids: Optional[Sequence[int]] = None,
                   state=None) -> ForcedOutput:
    """Budget forcing (RL^V appendix B, docs/methods/rlv.md#spec-test-time) with total budget k = `budget` and buffer
    b = `buffer`.

    1. sample up to k - b tokens G0;
    2. a row that stopped by itself (stop token) is final as is [choice: only rows cut by the length limit are
       forced];
    3. otherwise cut G0 to its last complete sentence T(G0) (all of G0 when it has no "."), append `marker`
       (`THINK_CONCLUSION_MARKER` for thinking models, default `CONCLUSION_MARKER`), and continue from
       prompt + T(G0) + marker for at most k - len(encode(T(G0) + marker)) tokens, so the response never
       exceeds k tokens. Returns R = T(G0) + marker + G1.

    prompts: rendered prompt strings or token-id lists. tokenizer: anything with `encode`, `decode`, `stop_ids`
    and `pad_id`. The forced prefix is re-encoded from text, so R's text is exact even where a token straddled
    the cut.
    """
    if budget < 2 or not 1 <= buffer < budget:
        raise ValueError(f"budget_forcing: need budget k >= 2 and 1 <= buffer b < k, got k={budget}, b={buffer}")
    stop_ids = tuple(tokenizer.stop_ids if stop_token_ids is None else stop_token_ids)
    marker_tokens = len(tokenizer.encode(marker))
    if marker_tokens >= buffer:
        raise ValueError(f"budget_forcing: the buffer b={buffer} must exceed the marker's {marker_tokens} tokens "
                         f"({marker!r}), or no room is left to answer after it; raise `buffer`")
    prompt_ids = [tokenizer.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
    k1, k2 = jax.random.split(key)
    kw = dict(temperature=temperature, top_p=top_p, top_k=top_k, stop_token_ids=stop_ids,
              pad_id=tokenizer.pad_id, state=state)
    first = sample(model, prompt_ids, k1, max_new_tokens=budget - buffer, num_samples=num_samples, **kw)
    first_ids = [_strip_stop(c, stop_ids) for c in first.completions()]
    first_texts = [tokenizer.decode(c) for c in first_ids]
    texts = list(first_texts)
    tokens = first.completions()
    num_tokens = first.lengths.astype(np.int32).copy()
    finish = first.finish_reason.astype(np.int32).copy()
    forced = first.finish_reason == FINISH_LENGTH
    heads, room = {}, {}  # row -> (T(G0) + marker, its token ids); row -> tokens left for G1
    prefixes = {}
    for r in np.flatnonzero(forced):
        head = truncate_to_last_sentence(first_texts[r]) + marker
        head_ids = tokenizer.encode(head)
        heads[r], room[r] = (head, head_ids), budget - len(head_ids)
        prefixes[r] = prompt_ids[first.prompt_index[r]] + head_ids
        if room[r] <= 0:
            # Only when re-encoding T(G0) took more tokens than sampling it did: the budget still holds.
            tokens[r] = head_ids[:budget]
            texts[r], num_tokens[r], finish[r] = tokenizer.decode(tokens[r]), budget, FINISH_LENGTH
    cont = [r for r in room if room[r] > 0]
    if cont:
        second = sample(model, [prefixes[r] for r in cont], k2, max_new_tokens=max(room[r] for r in cont), **kw)
        second_ids = second.completions()
        for j, r in enumerate(cont):
            # One call serves every row with the longest room; each row keeps only its own room, which is what
            # a per-row limit would have produced.
            ids = second_ids[j][:room[r]]
            cut = len(ids) < int(second.lengths[j])
            finish[r] = FINISH_LENGTH if cut else second.finish_reason[j]
            texts[r] = heads[r][0] + tokenizer.decode(_strip_stop(ids, stop_ids))
            tokens[r] = heads[r][1] + ids
            num_tokens[r] = len(tokens[r])
    return ForcedOutput(texts, tokens, num_tokens, forced.astype(bool), first_texts, finish,
                        first.prompt_index.astype(np.int32))


# ----------------------------------------------------------------------------------------------------------------
# Whole-dataset evaluation
# ----------------------------------------------------------------------------------------------------------------
STRATEGY_LABELS = {
    "pass": "pass@k",
    "majority": "maj@k",
    "best_of_n": "BoN@k (self)",
    "weighted": "weighted@k (self)",
    "best_of_n_judge": "BoN@k (judge)",
    "weighted_judge": "weighted@k (judge)",
}


def accuracy_curves(correct: np.ndarray, classes: np.ndarray, ks: Sequence[int], *,
                    scores: Optional[dict] = None, num_subsets: int = 1000, seed: int = 0) -> dict:
    """Every strategy at every k, from one pool of samples.

    correct: [Q, N] 0/1; classes: [Q, N] equivalence-class ids (-1 = no answer); scores: {verifier name: [Q, N]}
    (name "self" gives keys "best_of_n"/"weighted", any other name X gives "best_of_n_X"/"weighted_X").
    Returns {strategy: {"mean": [len(ks)], "std": [len(ks)] or None}} averaged over questions. For the subset
    estimators `std` is the spread of the dataset accuracy of one k-sample run, sqrt(sum_q var_q) / Q
    (questions independent); pass@k and best-of-k are exact expectations and have none.
    """
    correct = np.asarray(correct, np.float64)
    classes = np.asarray(classes, np.int64)
    if correct.ndim != 2 or classes.shape != correct.shape:
        raise ValueError(f"correct and classes must both be [questions, samples], got {correct.shape} and "
                         f"{classes.shape}")
    q, n = correct.shape
    scores = dict(scores or {})
    for name, s in scores.items():
        if np.shape(s) != (q, n):
            raise ValueError(f"scores[{name!r}] must be [questions, samples] = {(q, n)}, got {np.shape(s)}")
    ks = [int(k) for k in ks]
    out: dict = {}

    def exact(fn) -> dict:
        return {"mean": [float(np.mean([fn(i, k) for i in range(q)])) for k in ks], "std": None}

    def subset(fn) -> dict:
        means, stds = [], []
        for k in ks:
            ests = [fn(i, k) for i in range(q)]
            means.append(float(np.mean([e.mean for e in ests])))
            stds.append(float(math.sqrt(sum(e.std ** 2 for e in ests)) / q))
        return {"mean": means, "std": stds}

    out["pass"] = exact(lambda i, k: est.pass_at_k(n, int(correct[i].sum()), k))
    out["majority"] = subset(lambda i, k: est.majority_at_k(classes[i], correct[i], k, num_subsets=num_subsets,
                                                            seed=(seed, i, k)))
    for name, s in scores.items():
        s = np.asarray(s, np.float64)
        suffix = "" if name == "self" else f"_{name}"
        out[f"best_of_n{suffix}"] = exact(lambda i, k, s=s: est.best_of_k(s[i], correct[i], k))
        out[f"weighted{suffix}"] = subset(lambda i, k, s=s: est.weighted_at_k(
            classes[i], s[i], correct[i], k, num_subsets=num_subsets, seed=(seed, i, k)))
    return out


def default_reward(completions: Sequence[str], examples: Sequence[Any], *, grader=None, extraction: str = "boxed"):
    """Reward of each completion against its example: reasoning-gym examples are scored by their task's
    scorer, everything else by math equivalence with `example.answer` of the answer `extraction` finds
    (`rewards.math.math_reward`: "boxed" or "boxed_or_last_number")."""
    if examples and all(getattr(e, "meta", {}).get("source") == "reasoning_gym" for e in examples):
        from jaxrl_reason.data.procedural import reasoning_gym_reward

        return reasoning_gym_reward(completions, examples)
    return math_reward(list(completions), [e.answer for e in examples], grader=grader, extraction=extraction)


def evaluate(model, tokenizer, examples: Sequence[Any], *, n: int, max_new_tokens: int, seed: int = 0,
             temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, ks: Optional[Sequence[int]] = None,
             num_subsets: int = 1000, normalize: bool = False, judge: Optional[tuple] = None,
             prompt_batch_size: int = 8, score_batch_size: int = 32, state=None,
             reward_fn: Optional[Callable] = None, grader=None, progress: bool = True,
             keep_samples: bool = True, check_tokens: int = 0) -> dict:
    """Sample `n` solutions per question ONCE, score them ONCE with the model as its own verifier (and with an
    optional `judge=(model, tokenizer)` as LLM-as-a-judge), then report every strategy at every k in `ks`
    (default 1, 2, 4, ..., n) from those same samples.

    examples: objects with `.question`, `.answer`, `.id` (data.datasets.Example). reward_fn(completions,
    examples) -> RewardResult whose details hold "extracted" (default: `default_reward`).
    Returns a JSON-ready dict: "strategies" ({name: {"mean", "std"}} per k, names in STRATEGY_LABELS),
    "tokens_per_question" (mean generated / verifier-prompt tokens a k-sample strategy spends), "verifier"
    (score quality), "vote_headroom", "best_of_n_chance" (Best-of-n of a verifier that reads nothing),
    "finish_reasons", "config", and with `keep_samples` the per-question "samples".
    check_tokens > 0: the model as its own verifier first writes a worked check of at most that many tokens
    (`verifier.verify_inputs`; counted in "verifier_prompt" tokens); a judge reads the verdict off the prompt.
    """
    examples = list(examples)
    if not examples:
        raise ValueError("evaluate: no examples given")
    if n < 1:
        raise ValueError(f"evaluate: n must be >= 1, got {n}")
    ks = est.power_of_two_ks(n) if ks is None else sorted({int(k) for k in ks})
    if ks[0] < 1 or ks[-1] > n:
        raise ValueError(f"evaluate: every k must be in [1, n={n}], got {ks}")
    q = len(examples)
    reward_fn = reward_fn or (lambda c, e: default_reward(c, e, grader=grader))

    # 1. Sample, a few questions per sampler call.
    prompts = tokenizer.encode_ragged([tokenizer.render_prompt(solve_prompt(e.question)) for e in examples])
    num_calls = -(-q // prompt_batch_size)
    bar = CallbackBar(progress, num_calls * max_new_tokens, f"sampling {q} x {n}", "step")
    tokens, lengths, finish = [], [], []
    key = jax.random.PRNGKey(seed)
    for c in range(num_calls):
        bar.base = c * max_new_tokens
        out = sample(model, prompts[c * prompt_batch_size:(c + 1) * prompt_batch_size], jax.random.fold_in(key, c),
                     max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                     num_samples=n, stop_token_ids=tokenizer.stop_ids, pad_id=tokenizer.pad_id, state=state,
                     progress=lambda step, total: bar.at(step))
        bar.at(max_new_tokens)
        tokens.extend(out.completions())
        lengths.append(out.lengths)
        finish.append(out.finish_reason)
    bar.close()
    lengths = np.concatenate(lengths).reshape(q, n)
    finish = np.concatenate(finish)
    completions = tokenizer.batch_decode(tokens, skip_special_tokens=True)

    # 2. Rewards and answer classes.
    repeated = [e for e in examples for _ in range(n)]
    reward = reward_fn(completions, repeated)
    correct = np.asarray(reward.scores, np.float64).reshape(q, n)
    answers = [d.get("extracted") for d in reward.details]
    classes = np.array([equivalence_classes(answers[i * n:(i + 1) * n], grader=grader) for i in range(q)],
                       np.int64).reshape(q, n)

    # 3. Verifier scores (self, then the judge), one prefill per sample.
    questions = [e.question for e in repeated]
    verifiers = {"self": (model, tokenizer, state)}
    if judge is not None:
        verifiers["judge"] = (judge[0], judge[1], None)
    scores, logprobs, verify_len = {}, {}, None
    for name, (vm, vt, vs) in verifiers.items():
        bar = CallbackBar(progress, q * n, f"scoring ({name})", "sample")
        inputs = verify_inputs(vm, vt, questions, completions, check_tokens=check_tokens if name == "self" else 0,
                               batch_size=score_batch_size, state=vs)
        lp = verdict_logprobs(vm, vt, questions, completions, batch_size=score_batch_size, state=vs,
                              progress=lambda done, total: bar.at(done), inputs=inputs)
        bar.close()
        logprobs[name] = lp.reshape(q, n, 2)
        scores[name] = scores_from_logprobs(lp, normalize=normalize).reshape(q, n)
        if name == "self":
            verify_len = np.array([len(p) for p in inputs]).reshape(q, n)

    # 4. Every strategy at every k.
    strategies = accuracy_curves(correct, classes, ks, scores=scores, num_subsets=num_subsets, seed=seed)
    mean_len = float(lengths.mean())
    result = {
        "num_questions": q, "n": n, "ks": ks, "num_subsets": num_subsets,
        "sample_accuracy": float(correct.mean()),
        "strategies": strategies,
        "tokens_per_question": {
            "generated": [k * mean_len for k in ks],
            "verifier_prompt": [k * float(verify_len.mean()) for k in ks],
        },
        "mean_completion_tokens": mean_len,
        "no_answer_rate": float((classes < 0).mean()),
        "finish_reasons": {name: float((finish == i).mean()) for i, name in enumerate(FINISH_NAMES)},
        "verifier": {name: verifier_quality(s, correct) for name, s in scores.items()},
        "vote_headroom": {name: vote_headroom(correct, classes, s) for name, s in scores.items()},
        "best_of_n_chance": best_of_n_chance(correct, [completions[i * n:(i + 1) * n] for i in range(q)]),
        "config": {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k,
                   "seed": seed, "score": "P(Yes)/(P(Yes)+P(No))" if normalize else "P(Yes)",
                   "check_tokens": check_tokens},
    }
    if keep_samples:
        result["samples"] = [{
            "id": e.id, "question": e.question, "gold": e.answer,
            "completions": completions[i * n:(i + 1) * n], "answers": answers[i * n:(i + 1) * n],
            "classes": classes[i].tolist(), "correct": correct[i].tolist(), "lengths": lengths[i].tolist(),
            "scores": {name: s[i].tolist() for name, s in scores.items()},
            "logprob_yes_no": {name: lp[i].tolist() for name, lp in logprobs.items()},
        } for i, e in enumerate(examples)]
    return result
