"""The test-time strategies that spend tokens differently from one pool of N samples, run over a dataset.

`test_time.evaluate` reports the votes (pass@k, maj@k, BoN@k, weighted@k) from one pool; the strategies here
generate more (or differently) and report `rows` of {..., "acc", "tokens"} so every strategy lands on the same
accuracy-against-tokens axis (`tokens`: mean tokens generated per question, cumulative where a strategy runs in
rounds; a verifier's prefill is not generation and is not counted):

  refinement_report  CURE's self-refinement (`refine.self_refine`, verdict generated) from the pool's first sample:
                     per-round accuracy, cumulative tokens, verdict P / R / F1 (wrong = positive), critiques that
                     parse, and majority voting over the same pool at the same number of generated tokens
  length_selection   confidence-based length selection over increasing budgets (`select_length_by_confidence`)
  forced_budgets     budget forcing (`budget_forcing`) at each of several total budgets

[choice] Majority "at the same tokens" as round t of refinement: k_t = (cumulative tokens of round t) / (mean
tokens of one pool sample); maj@k at a fractional k is interpolated linearly between maj@floor(k) and
maj@ceil(k) (both unbiased estimates from the pool); k_t above the pool's N is capped at N and flagged.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.inference import estimators as est
from jaxrl_reason.inference.refine import RefineResult, make_generate, self_refine
from jaxrl_reason.inference.test_time import (CONCLUSION_MARKER, BudgetRun, budget_forcing,
                                              select_length_by_confidence)
from jaxrl_reason.inference.verifier import scores_from_logprobs, verdict_logprobs
from jaxrl_reason.rewards.math import equivalence_classes


def majority_at_tokens(classes: np.ndarray, correct: np.ndarray, tokens: float, tokens_per_sample: float, *,
                       num_subsets: int = 1000, seed: int = 0) -> dict:
    """maj@k of a pool [Q, N] at the k whose generation costs `tokens` per question (see the module's [choice]).

    Returns {"k": the fractional k, "k_used": min(k, N), "capped": k > N, "acc", "tokens": k_used x tokens per
    sample}."""
    classes, correct = np.asarray(classes), np.asarray(correct, np.float64)
    if classes.shape != correct.shape or classes.ndim != 2:
        raise ValueError(f"majority_at_tokens: classes {classes.shape} and correct {correct.shape} must both be "
                         "[questions, samples]")
    if tokens_per_sample <= 0:
        raise ValueError(f"majority_at_tokens: tokens_per_sample must be > 0, got {tokens_per_sample}")
    q, n = classes.shape
    k = max(float(tokens) / float(tokens_per_sample), 1.0)
    k_used = min(k, float(n))

    def maj(kk: int) -> float:
        return float(np.mean([est.majority_at_k(classes[i], correct[i], kk, num_subsets=num_subsets,
                                                seed=(seed, i, kk)).mean for i in range(q)]))

    lo, hi = int(math.floor(k_used)), int(math.ceil(k_used))
    acc = maj(lo) if lo == hi else (hi - k_used) * maj(lo) + (k_used - lo) * maj(hi)
    return {"k": k, "k_used": k_used, "capped": k > n, "acc": acc, "tokens": k_used * float(tokens_per_sample)}


def refinement_report(result: RefineResult, *, pool_classes: Optional[np.ndarray] = None,
                      pool_correct: Optional[np.ndarray] = None, tokens_per_sample: Optional[float] = None,
                      num_subsets: int = 1000, seed: int = 0) -> dict:
    """JSON-ready rows of a self-refinement run: one per round t = 0..T with "acc", cumulative "tokens" per
    question, and for t >= 1 the verdict precision / recall / F1 of that round's critiques (wrong = positive),
    its strict F1 (an unparsed verdict scored as the wrong call), how many were written, the share whose verdict
    parsed and the share that parse with every field; with a pool, "majority_same_tokens" beside
    each round (`majority_at_tokens`); "per_example" holds the arrays (`RefineResult.per_example`) for paired
    comparisons."""
    rows = []
    for t, (acc, tok) in enumerate(zip(result.accuracy, result.tokens_per_example)):
        row = {"round": t, "acc": float(acc), "tokens": float(tok)}
        if t:
            v = result.verdict_metrics(t)
            row.update({"verdict_precision": v["precision"], "verdict_recall": v["recall"], "verdict_f1": v["f1"],
                        "verdict_f1_strict": result.verdict_metrics(t, strict=True)["f1"],
                        "verdict_parsed": result.verdict_parsed_share(t), "critiqued": v["critiqued"],
                        "well_formed": result.well_formed_share(t)})
        if pool_classes is not None:
            m = majority_at_tokens(pool_classes, pool_correct, tok, tokens_per_sample, num_subsets=num_subsets,
                                   seed=seed)
            row.update({"majority_same_tokens": m["acc"], "majority_k": m["k_used"], "majority_capped": m["capped"]})
        rows.append(row)
    pooled = result.verdict_metrics()
    return {"rows": rows, "verdict": pooled, "verdict_strict": result.verdict_metrics(strict=True),
            "verdict_parsed": result.verdict_parsed_share(), "well_formed": result.well_formed_share(),
            "settled": float(np.mean(result.stopped >= 0)) if result.stopped.size else 0.0,
            "per_example": result.per_example()}


def evaluate_refinement(model, tokenizer, examples: Sequence[Any], reward_fn: Callable, *, rounds: int,
                        max_new_tokens: int, critique_max_new_tokens: Optional[int] = None,
                        initial: Optional[Sequence[str]] = None, initial_tokens: Optional[Sequence[int]] = None,
                        pool_classes=None, pool_correct=None,
                        tokens_per_sample: Optional[float] = None, temperature: float = 0.0, top_p: float = 1.0,
                        top_k: int = 0, seed: int = 0, batch_size: int = 8, num_subsets: int = 1000,
                        params=None, guided_layout: str = "after", critique_format: str = "fields",
                        prompt_wording: str = "short", conversation: bool = False) -> dict:
    """`self_refine` for `rounds` rounds (verdict generated, not forced), then `refinement_report`.

    initial / initial_tokens: round 0's solution texts and their generated token counts, e.g. the first sample of
    each question of an evaluation pool; pool_*: that pool's [Q, N] classes / correctness and mean tokens per
    sample, for majority voting at the same tokens; conversation: the rounds as turns of one conversation
    (`refine.self_refine`). "turn_tokens": per round, the mean generated critique / re-solve tokens per question
    and the prompt tokens read before them (all of them, and only the new turns')."""
    generate = make_generate(model, tokenizer, params=params, temperature=temperature, top_p=top_p, top_k=top_k,
                             seed=seed, batch_size=batch_size)
    res = self_refine(model, tokenizer, examples, reward_fn, rounds=rounds, max_new_tokens=max_new_tokens,
                      critique_max_new_tokens=critique_max_new_tokens, generate=generate, initial=initial,
                      initial_tokens=initial_tokens, guided_layout=guided_layout, critique_format=critique_format,
                      prompt_wording=prompt_wording, conversation=conversation)
    report = refinement_report(res, pool_classes=pool_classes, pool_correct=pool_correct,
                               tokens_per_sample=tokens_per_sample, num_subsets=num_subsets, seed=seed)
    report["config"] = {"rounds": rounds, "temperature": temperature, "max_new_tokens": max_new_tokens,
                        "critique_max_new_tokens": critique_max_new_tokens or max_new_tokens,
                        "guided_layout": guided_layout, "critique_format": critique_format,
                        "prompt_wording": prompt_wording, "as_conversation": bool(conversation),
                        "round0": "pool's first sample" if initial is not None else "generated"}
    report["turn_tokens"] = {k: v.mean(axis=1).tolist() for k, v in res.turns.items()}
    report["critiques"] = res.critiques
    return report


def length_selection(pools: Sequence[dict], tau: float, *, verifier: str = "self") -> dict:
    """Confidence-based length selection per question over `pools`, one `test_time.evaluate` result (with
    samples) per budget, in increasing budget order (`config.max_new_tokens` is the budget).

    Rows: one per budget ("budget", "acc" = weighted@N there alone, "majority" = maj@N, "tokens" per question;
    both votes exact over all N samples)
    and "selection": "acc" of the chosen answers, "tokens" spent per question (every budget tried, in order, up
    to the chosen one), "reached" (share of questions whose winner met tau), "chosen" (questions per budget)."""
    if not pools:
        raise ValueError("length_selection: give at least one budget's pool")
    budgets = [int(p["config"]["max_new_tokens"]) for p in pools]
    q = pools[0]["num_questions"]
    if any(p["num_questions"] != q for p in pools):
        raise ValueError("length_selection: every budget's pool must cover the same questions")
    rows = []
    for b, p in zip(budgets, pools):
        n, s = p["n"], p["samples"]
        weighted = [est.weighted_at_k(r["classes"], r["scores"][verifier], r["correct"], n).mean for r in s]
        majority = [est.majority_at_k(r["classes"], r["correct"], n).mean for r in s]
        rows.append({"budget": b, "acc": float(np.mean(weighted)), "majority": float(np.mean(majority)),
                     "tokens": float(np.mean([sum(r["lengths"]) for r in s]))})
    picks, spent, reached, chosen = [], [], [], {b: 0 for b in budgets}
    for i in range(q):
        runs = []
        for b, p in zip(budgets, pools):
            s = p["samples"][i]
            runs.append(BudgetRun(b, s["answers"], s["scores"][verifier], tokens=int(sum(s["lengths"])),
                                  correct=s["correct"], classes=s["classes"]))
        sel = select_length_by_confidence(runs, tau)
        picks.append(bool(sel.choice.correct))
        spent.append(sel.tokens_spent)
        reached.append(sel.reached)
        chosen[sel.budget] += 1
    selection = {"tau": tau, "acc": float(np.mean(picks)), "tokens": float(np.mean(spent)),
                 "reached": float(np.mean(reached)), "chosen": {str(b): c for b, c in chosen.items()}}
    return {"rows": rows, "selection": selection}


def forced_budgets(model, tokenizer, examples: Sequence[Any], reward_fn: Callable, *, budgets: Sequence[int],
                   buffer: int, n: int, marker: str = CONCLUSION_MARKER, temperature: float = 1.0,
                   top_p: float = 1.0, top_k: int = 0, seed: int = 0, batch_size: int = 8,
                   score_batch_size: int = 32, normalize: bool = False, grader=None, state=None,
                   check_tokens: int = 0) -> dict:
    """Budget forcing at each total budget k in `budgets` (buffer b each), N samples per question; the weighted
    vote's self-verifier reads its verdict after a written check of at most `check_tokens` tokens when > 0.

    Rows: "budget", "acc" (per-sample accuracy), "majority" (maj@N), "weighted" (weighted@N, self-verifier
    scores), "tokens" (per question: N x mean response tokens, forced prefix and conclusion included), "forced"
    (share of samples cut at k - b and made to conclude)."""
    examples = list(examples)
    q = len(examples)
    prompts = tokenizer.encode_ragged([tokenizer.render_prompt(solve_prompt(e.question)) for e in examples])
    repeated = [e for e in examples for _ in range(n)]
    rows = []
    for j, k in enumerate(sorted(int(b) for b in budgets)):
        texts, lengths, forced = [], [], []
        for c in range(0, q, batch_size):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), j), c)
            out = budget_forcing(model, tokenizer, prompts[c:c + batch_size], key, budget=k, buffer=buffer,
                                 marker=marker, num_samples=n, temperature=temperature, top_p=top_p, top_k=top_k,
                                 state=state)
            texts += out.texts
            lengths.append(out.num_tokens)
            forced.append(out.forced)
        lengths, forced = np.concatenate(lengths), np.concatenate(forced)
        graded = reward_fn(texts, repeated)
        correct = np.asarray(graded.scores, np.float64).reshape(q, n)
        answers = [d.get("extracted") for d in graded.details]
        classes = np.array([equivalence_classes(answers[i * n:(i + 1) * n], grader=grader) for i in range(q)],
                           np.int64).reshape(q, n)
        lp = verdict_logprobs(model, tokenizer, [e.question for e in repeated], texts, batch_size=score_batch_size,
                              state=state, check_tokens=check_tokens)
        scores = scores_from_logprobs(lp, normalize=normalize).reshape(q, n)
        rows.append({
            "budget": k, "acc": float(correct.mean()),
            "majority": float(np.mean([est.majority_at_k(classes[i], correct[i], n).mean for i in range(q)])),
            "weighted": float(np.mean([est.weighted_at_k(classes[i], scores[i], correct[i], n).mean
                                       for i in range(q)])),
            "tokens": float(n * lengths.mean()), "forced": float(forced.mean())})
    return {"rows": rows, "config": {"buffer": buffer, "marker": marker, "n": n, "temperature": temperature,
                                     "check_tokens": check_tokens}}
