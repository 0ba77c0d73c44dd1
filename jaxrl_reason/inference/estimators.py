"""Unbiased test-time estimators from one pool of `N` samples per question
(docs/methods/rlv.md#spec-test-time-estimators).

Every estimator answers "what would strategy X score with k samples?" from the same `N >= k` samples, so one
generation pass gives a whole accuracy-vs-k curve:

  pass_at_k(n, c, k)                      1 - C(n-c, k) / C(n, k), exact, in a stable product form
  best_of_k(scores, correct, k)           exact expectation over k-subsets (RL^V appendix C), ties averaged
  majority_at_k(classes, correct, k)      mean over S seeded random k-subsets (exact when C(N, k) <= S)
  weighted_at_k(classes, scores, correct, k)   same, votes weighted by verifier score

Answers enter the voting estimators as *equivalence-class ids* (`rewards.math.equivalence_classes`, -1 = no
answer), so drawing thousands of subsets never re-runs math-verify.

Tie rule, shared by all voting/selection estimators: when several candidates tie for the top, the estimate is
the *expected* correctness under a uniformly random tie-break, i.e. the mean correctness of the tied candidates.
"""
from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

# Relative tolerance under which two summed vote weights count as a tie (float sums are order-dependent).
_WEIGHT_TIE_RTOL = 1e-9


class SubsetEstimate(NamedTuple):
    """An estimate averaged over k-subsets of the N samples.

    mean:        the estimate (mean over subsets of the subset's outcome in [0, 1])
    std:         standard deviation of the per-subset outcome (spread of one k-sample run, not of the mean)
    num_subsets: how many subsets were averaged
    exhaustive:  True when every one of the C(N, k) subsets was used, so `mean` is exact
    """

    mean: float
    std: float
    num_subsets: int
    exhaustive: bool


def _check_nk(n: int, k: int, name: str) -> None:
    if n < 1:
        raise ValueError(f"{name}: need at least one sample, got n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"{name}: k must be in [1, n={n}], got k={k}; generate at least k samples per question")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k / i), which never forms the (astronomically large) binomials.
    """
    n, c, k = int(n), int(c), int(k)
    _check_nk(n, k, "pass_at_k")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: the number correct c must be in [0, n={n}], got c={c}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def best_of_k_weights(n: int, k: int) -> np.ndarray:
    """w_i = C(n-i-1, k-1) / C(n, k) for i in [0, n): the probability that the i-th best of n samples is the
    best of a uniformly random k-subset. Zero for i > n-k; sums to 1.

    Built by the ratio w_{i+1} / w_i = (n-i-k) / (n-i-1), starting at w_0 = k/n, so no binomial is formed.
    """
    _check_nk(n, k, "best_of_k_weights")
    w = np.zeros((n,), np.float64)
    w[0] = k / n
    for i in range(n - k):
        w[i + 1] = w[i] * (n - i - k) / (n - i - 1)
    return w


def _as_1d(x, name: str, dtype) -> np.ndarray:
    a = np.asarray(x, dtype)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional [N] (the N samples of one question), got shape {a.shape}")
    return a


def best_of_k(scores: Sequence[float], correct: Sequence[float], k: int) -> float:
    """Expected correctness of the top-scored sample of a uniformly random k-subset of the N samples
    (RL^V appendix C): sort by score descending, BoK = sum_{i=0}^{N-k} C(N-i-1, k-1) a_i / C(N, k).

    Ties: within a group of equal scores every order is equally likely, and the formula is linear in the
    a_i, so averaging over tie orders equals replacing each a_i of a tied group by the group's mean.

    scores: [N] verifier scores; correct: [N] 0/1 correctness (a float in [0, 1] is taken as expected
    correctness).
    """
    s = _as_1d(scores, "best_of_k: scores", np.float64)
    a = _as_1d(correct, "best_of_k: correct", np.float64)
    if s.shape != a.shape:
        raise ValueError(f"best_of_k: scores {s.shape} and correct {a.shape} must have one entry per sample")
    if not np.all(np.isfinite(s)):
        raise ValueError("best_of_k: scores contain NaN or inf; a verifier score must be a finite number")
    n = s.shape[0]
    _check_nk(n, int(k), "best_of_k")
    order = np.argsort(-s, kind="stable")
    s_sorted, a_sorted = s[order], a[order]
    # Each maximal run of equal scores gets its mean correctness.
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    sums = np.add.reduceat(a_sorted, starts)
    sizes = np.diff(np.r_[starts, n])
    a_tied = np.repeat(sums / sizes, sizes)
    return float(np.dot(best_of_k_weights(n, int(k)), a_tied))


def _class_correctness(classes: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """Per class id (0..C-1): mean correctness of its members. Members of one equivalence class share their
    final answer, so this is 0 or 1 unless the grader judged equivalent answers differently."""
    num = int(classes.max()) + 1 if classes.size and classes.max() >= 0 else 0
    valid = classes >= 0
    totals = np.bincount(classes[valid], weights=correct[valid], minlength=num)
    counts = np.bincount(classes[valid], minlength=num)
    return np.divide(totals, counts, out=np.zeros((num,), np.float64), where=counts > 0)


def _subsets(n: int, k: int, num_subsets: int, seed) -> tuple[np.ndarray, bool]:
    """[S, k] sample indices: all C(n, k) subsets when that many fit in `num_subsets`, else `num_subsets`
    independent uniform k-subsets (each drawn without replacement) from a generator seeded by `seed`."""
    total = math.comb(n, k)
    if total <= num_subsets:
        return np.array(list(itertools.combinations(range(n), k)), np.int64).reshape(total, k), True
    rng = np.random.default_rng(seed)
    # The first k columns of a uniformly random permutation of each row: a uniform k-subset.
    return np.argsort(rng.random((num_subsets, n)), axis=1)[:, :k], False


def vote_subset_outcomes(classes: Sequence[int], correct: Sequence[float], k: int, *,
                         weights: Optional[Sequence[float]] = None, num_subsets: int = 1000,
                         seed=0) -> tuple[np.ndarray, bool]:
    """Outcome of a (weighted) vote on each of S k-subsets: [S] expected correctness of the winning class, and
    whether the subsets were exhaustive. Samples with class -1 (no answer) cast no vote; a subset without any
    answer scores 0. `weights=None` is a plain majority vote."""
    cls = _as_1d(classes, "classes", np.int64)
    a = _as_1d(correct, "correct", np.float64)
    if cls.shape != a.shape:
        raise ValueError(f"classes {cls.shape} and correct {a.shape} must have one entry per sample")
    if np.any(cls < -1):
        raise ValueError("classes must be equivalence-class ids >= 0, or -1 for a sample without an answer")
    w = np.ones_like(a) if weights is None else _as_1d(weights, "scores", np.float64)
    if w.shape != a.shape:
        raise ValueError(f"scores {w.shape} and correct {a.shape} must have one entry per sample")
    if weights is not None and (not np.all(np.isfinite(w)) or np.any(w < 0)):
        raise ValueError("weighted vote: scores must be finite and >= 0 (use probabilities, e.g. P(Yes))")
    if num_subsets < 1:
        raise ValueError(f"num_subsets must be >= 1, got {num_subsets}")
    n = cls.shape[0]
    _check_nk(n, int(k), "vote estimator")
    class_ok = _class_correctness(cls, a)
    num_classes = class_ok.shape[0]
    idx, exhaustive = _subsets(n, int(k), int(num_subsets), seed)
    s = idx.shape[0]
    if num_classes == 0:
        return np.zeros((s,), np.float64), exhaustive
    sub_cls, sub_w = cls[idx], w[idx]
    voted = sub_cls >= 0
    cell = (np.arange(s)[:, None] * num_classes + np.where(voted, sub_cls, 0))[voted]  # (subset, class) cell
    tally = np.bincount(cell, weights=sub_w[voted], minlength=s * num_classes).reshape(s, num_classes)
    present = np.bincount(cell, minlength=s * num_classes).reshape(s, num_classes) > 0
    top = np.where(present, tally, -np.inf).max(axis=1, keepdims=True)
    # A class must be present in the subset to win; with zero weights every present class ties at 0.
    winners = present & (tally >= top - _WEIGHT_TIE_RTOL * np.abs(top))
    n_win = winners.sum(axis=1)
    outcome = np.divide((winners * class_ok[None, :]).sum(axis=1), n_win, out=np.zeros((s,), np.float64),
                        where=n_win > 0)
    return outcome, exhaustive


def _estimate(outcome: np.ndarray, exhaustive: bool) -> SubsetEstimate:
    return SubsetEstimate(float(outcome.mean()), float(outcome.std()), int(outcome.shape[0]), bool(exhaustive))


def majority_at_k(classes: Sequence[int], correct: Sequence[float], k: int, *, num_subsets: int = 1000,
                  seed=0) -> SubsetEstimate:
    """maj@k: the expected correctness of the most frequent answer class among k samples, averaged over
    `num_subsets` seeded random k-subsets (exact when C(N, k) <= num_subsets).

    classes: [N] equivalence-class ids (-1 = no answer); correct: [N] 0/1. seed: anything
    `np.random.default_rng` accepts (e.g. `(seed, question_index)` for independent streams per question).
    """
    return _estimate(*vote_subset_outcomes(classes, correct, k, num_subsets=num_subsets, seed=seed))


def weighted_at_k(classes: Sequence[int], scores: Sequence[float], correct: Sequence[float], k: int, *,
                  num_subsets: int = 1000, seed=0) -> SubsetEstimate:
    """weighted@k: like `majority_at_k`, but each sample's vote counts its verifier score (sum of scores per
    answer class, argmax)."""
    return _estimate(*vote_subset_outcomes(classes, correct, k, weights=scores, num_subsets=num_subsets,
                                           seed=seed))


def power_of_two_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, plus n itself when it is not a power of two: the k grid of accuracy-vs-k curves."""
    if n < 1:
        raise ValueError(f"need n >= 1 samples, got {n}")
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks
