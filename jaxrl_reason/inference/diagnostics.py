"""Research diagnostics of a verifier and a vote, grown from the RL^V investigations: how well scores separate
right from wrong samples (pooled and within a question), where weighted voting could beat the majority and what
score ratio it would need, and the Best-of-N of a verifier that reads nothing. `inference.test_time.evaluate`
reports all three beside the strategies' accuracies."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from jaxrl_reason.inference import estimators as est


def verifier_quality(scores: np.ndarray, correct: np.ndarray) -> dict:
    """How well scores separate correct from wrong samples: mean score of each, AUROC (ties count 1/2) and
    balanced accuracy of `score > 0.5`. Values are None when one of the two groups is empty. With [questions, n]
    arrays also the mean AUROC within a question over the questions that have both kinds of sample."""
    s = np.asarray(scores, np.float64).reshape(-1)
    y = np.asarray(correct, np.float64).reshape(-1) > 0.5
    pos, neg = int(y.sum()), int((~y).sum())
    res = {"num_correct": pos, "num_wrong": neg,
           "mean_score_correct": float(s[y].mean()) if pos else None,
           "mean_score_wrong": float(s[~y].mean()) if neg else None, "auroc": None, "balanced_accuracy": None}
    if pos and neg:
        res["auroc"] = _auroc(s, y)
        pred = s > 0.5
        res["balanced_accuracy"] = float(0.5 * (pred[y].mean() + (~pred[~y]).mean()))
    # Pooled AUROC rewards a verifier that only knows which *questions* look hard; Best-of-N and weighted voting
    # choose among one question's samples, so they need the AUROC within a question (rows = questions).
    res["within_question_auroc"], res["mixed_questions"] = None, 0
    if np.ndim(scores) == 2:
        per_q = [_auroc(sq, yq) for sq, yq in zip(np.asarray(scores, np.float64), np.asarray(correct) > 0.5)
                 if 0 < yq.sum() < len(yq)]
        res["mixed_questions"] = len(per_q)
        if per_q:
            res["within_question_auroc"] = float(np.mean(per_q))
    return res


def vote_headroom(correct: np.ndarray, classes: np.ndarray, scores: np.ndarray) -> dict:
    """Where a verifier could beat the majority vote over all N samples, and how far it is from doing so.

    correct, classes, scores: [Q, N]. Counts questions whose majority vote is wrong (`majority_wrong`, ties
    counted fractionally as `majority_at_k` does) and, of the ones a wrong answer wins outright (not a tie), those
    with a right sample (`solvable`: weighted voting's headroom); `rescued` / `broken`: questions the weighted vote
    gets right where the majority does not, and the reverse. On the solvable questions: the share of samples in the
    winning wrong answer (`top_wrong_share`, near 1 when the policy's error is systematic) and of right samples
    (`right_share`), and the score ratio a right sample would need over a top-wrong one to win the weighted vote
    (`needed_ratio`, the median of count(top wrong) / count(right)) beside the ratio the verifier gives
    (`score_ratio`, the median of mean score(right) / mean score(top wrong)). A verifier that only predicts which
    questions are hard gives ~1.
    """
    correct = np.asarray(correct, np.float64)
    classes = np.asarray(classes, np.int64)
    scores = np.asarray(scores, np.float64)
    if correct.ndim != 2 or classes.shape != correct.shape or scores.shape != correct.shape:
        raise ValueError(f"vote_headroom: correct, classes and scores must all be [questions, samples], got "
                         f"{correct.shape}, {classes.shape} and {scores.shape}")
    n = correct.shape[1]
    res = {"questions": int(correct.shape[0]), "majority_wrong": 0.0, "solvable": 0, "rescued": 0.0, "broken": 0.0,
           "top_wrong_share": None, "right_share": None, "needed_ratio": None, "score_ratio": None}
    shares, right_shares, needed, ratios = [], [], [], []
    for a, c, s in zip(correct, classes, scores):
        maj = float(est.vote_subset_outcomes(c, a, n, num_subsets=1)[0][0])
        weighted = float(est.vote_subset_outcomes(c, a, n, weights=s, num_subsets=1)[0][0])
        res["majority_wrong"] += 1.0 - maj
        res["rescued"] += max(weighted - maj, 0.0)
        res["broken"] += max(maj - weighted, 0.0)
        right = a > 0.5
        if maj >= 0.5 or not right.any():
            continue
        res["solvable"] += 1
        wrong_classes, counts = np.unique(c[~right & (c >= 0)], return_counts=True)
        if not len(wrong_classes):
            continue
        top = (c == wrong_classes[np.argmax(counts)]) & ~right
        shares.append(top.mean())
        right_shares.append(right.mean())
        needed.append(top.sum() / right.sum())
        ratios.append(s[right].mean() / max(s[top].mean(), 1e-30))
    if shares:
        res.update(top_wrong_share=float(np.mean(shares)), right_share=float(np.mean(right_shares)),
                   needed_ratio=float(np.median(needed)), score_ratio=float(np.median(ratios)))
    return res


def best_of_n_chance(correct: np.ndarray, completions: Sequence[Sequence[str]]) -> dict:
    """Best-of-N over all N samples for a verifier that reads nothing: it gives every distinct completion of a
    question an independent random score (identical texts get identical scores, as any deterministic verifier
    gives them), so the top-scored sample is right with probability (distinct right completions) / (distinct
    completions), not the share of right *samples*. A low-temperature policy repeats its right solution verbatim
    and errs in many different ways, so this chance level sits far below pass@1; a verifier reads solutions only
    where its Best-of-N beats it.

    correct: [Q, N]; completions: Q lists of N texts. Returns "accuracy" (over all questions) and, over the
    `mixed_questions` that have right and wrong samples, the share of right samples (`mixed_right_share`) beside
    that of right distinct completions (`mixed_distinct_right_share`).
    """
    correct = np.asarray(correct, np.float64)
    if correct.ndim != 2 or len(completions) != correct.shape[0] or any(
            len(c) != correct.shape[1] for c in completions):
        raise ValueError(f"best_of_n_chance: correct must be [questions, samples] and completions one list of "
                         f"{correct.shape[1:]} texts per question, got {correct.shape} and "
                         f"{[len(c) for c in completions][:4]}...")
    per_q, mixed_samples, mixed_distinct = [], [], []
    for a, texts in zip(correct, completions):
        by_text: dict = {}
        for text, c in zip(texts, a):
            by_text.setdefault(text, []).append(c)
        chance = float(np.mean([np.mean(v) for v in by_text.values()]))
        per_q.append(chance)
        if 0 < a.mean() < 1:
            mixed_samples.append(a.mean())
            mixed_distinct.append(chance)
    mean = lambda x: float(np.mean(x)) if x else None  # noqa: E731
    return {"accuracy": mean(per_q), "mixed_questions": len(mixed_samples),
            "mixed_right_share": mean(mixed_samples), "mixed_distinct_right_share": mean(mixed_distinct)}


def _auroc(s: np.ndarray, y: np.ndarray) -> float:
    """P(score of a random correct sample > that of a random wrong one), ties counted 1/2 (both classes present)."""
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based mean rank of each tied value
    pos = int(y.sum())
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * (len(y) - pos)))
