"""Test-time estimators against closed forms and brute-force enumeration of every k-subset."""
import itertools
import math
from collections import defaultdict

import numpy as np
import pytest

from jaxrl_reason.inference.estimators import (_subsets, best_of_k, best_of_k_weights, majority_at_k, pass_at_k,
                                               power_of_two_ks, vote_subset_outcomes, weighted_at_k)


# ---------------------------------------------------------------------------------------------- brute force
def brute_pass(correct, k):
    subs = list(itertools.combinations(range(len(correct)), k))
    return np.mean([any(correct[i] for i in s) for s in subs])


def brute_best(scores, correct, k):
    """Mean over all k-subsets of the correctness of the subset's top-scored sample; ties: uniform pick."""
    vals = []
    for s in itertools.combinations(range(len(scores)), k):
        top = max(scores[i] for i in s)
        winners = [i for i in s if scores[i] == top]
        vals.append(np.mean([correct[i] for i in winners]))
    return float(np.mean(vals))


def brute_vote(classes, correct, k, weights=None):
    """Mean over all k-subsets of the (tie-averaged) correctness of the winning answer class."""
    weights = [1.0] * len(classes) if weights is None else weights
    members = defaultdict(list)
    for i, c in enumerate(classes):
        if c >= 0:
            members[c].append(correct[i])
    class_ok = {c: np.mean(v) for c, v in members.items()}
    vals = []
    for s in itertools.combinations(range(len(classes)), k):
        tally = defaultdict(float)
        for i in s:
            if classes[i] >= 0:
                tally[classes[i]] += weights[i]
        if not tally:
            vals.append(0.0)
            continue
        top = max(tally.values())
        winners = [c for c, t in tally.items() if abs(t - top) <= 1e-9 * abs(top)]
        vals.append(np.mean([class_ok[c] for c in winners]))
    return float(np.mean(vals)), float(np.std(vals))


# ---------------------------------------------------------------------------------------------------- pass@k
@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_pass_at_k_matches_closed_form_and_brute_force(n):
    rng = np.random.default_rng(n)
    for c in range(n + 1):
        correct = rng.permutation([1] * c + [0] * (n - c))
        for k in range(1, n + 1):
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)
            assert pass_at_k(n, c, k) == pytest.approx(brute_pass(correct, k), abs=1e-12)


def test_pass_at_k_large_n_is_finite_and_exact():
    # C(1000, 500) overflows float64; the product form does not need it.
    closed = 1 - math.comb(1000 - 3, 500) / math.comb(1000, 500)  # Python ints: exact, then one rounding
    assert pass_at_k(1000, 3, 500) == pytest.approx(closed, rel=1e-12)
    assert pass_at_k(1000, 0, 500) == 0.0 and pass_at_k(1000, 501, 500) == 1.0


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k must be in"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c must be in"):
        pass_at_k(4, 5, 2)


# -------------------------------------------------------------------------------------------------- best-of-k
def test_best_of_k_weights_are_the_binomial_ratio():
    for n in (1, 4, 7, 12):
        for k in range(1, n + 1):
            w = best_of_k_weights(n, k)
            ref = [math.comb(n - i - 1, k - 1) / math.comb(n, k) for i in range(n)]
            np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-15)
            assert w.sum() == pytest.approx(1.0, abs=1e-12)
    w = best_of_k_weights(512, 256)  # C(512, 256) ~ 1e152: far from overflow in the ratio form, and exact
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0, abs=1e-9)
    assert w[0] == pytest.approx(0.5) and (w[257:] == 0).all()


@pytest.mark.parametrize("ties", [False, True])
def test_best_of_k_equals_brute_force(ties):
    rng = np.random.default_rng(7 + ties)
    for trial in range(40):
        n = int(rng.integers(1, 9))
        # Integer scores in a small range force many ties; continuous scores have none.
        scores = rng.integers(0, 3, n).astype(float) if ties else rng.random(n)
        correct = rng.integers(0, 2, n)
        for k in range(1, n + 1):
            assert best_of_k(scores, correct, k) == pytest.approx(brute_best(scores, correct, k), abs=1e-12), \
                (scores, correct, k)


def test_best_of_k_tie_rule_is_order_free_and_hand_checked():
    # Sorted: 0.9 (wrong), then a tie at 0.5 of one right and one wrong, then 0.1 (right).
    scores, correct = [0.5, 0.9, 0.1, 0.5], [1, 0, 1, 0]
    # k=2: weights 3/6, 2/6, 1/6 on [0, 1/2, 1/2, 1] -> 0 + 1/6 + 1/12 = 1/4
    assert best_of_k(scores, correct, 2) == pytest.approx(0.25)
    perm = [2, 0, 3, 1]
    assert best_of_k(np.array(scores)[perm], np.array(correct)[perm], 2) == pytest.approx(0.25)
    # k = N: the top sample decides; k = 1: plain accuracy
    assert best_of_k(scores, correct, 4) == 0.0
    assert best_of_k(scores, correct, 1) == pytest.approx(0.5)


def test_best_of_k_rejects_bad_input():
    with pytest.raises(ValueError, match="one entry per sample"):
        best_of_k([0.1, 0.2], [1], 1)
    with pytest.raises(ValueError, match="NaN"):
        best_of_k([0.1, float("nan")], [1, 0], 1)
    with pytest.raises(ValueError, match="k must be in"):
        best_of_k([0.1, 0.2], [1, 0], 3)


# ------------------------------------------------------------------------------------------ maj@k, weighted@k
def _random_pool(rng, n, num_classes=3):
    classes = rng.integers(-1, num_classes, n)  # -1: no answer
    class_ok = rng.integers(0, 2, num_classes)
    correct = np.where(classes >= 0, class_ok[np.maximum(classes, 0)], 0)
    return classes, correct


def test_vote_estimators_exact_when_all_subsets_fit():
    rng = np.random.default_rng(0)
    for trial in range(25):
        n = int(rng.integers(1, 9))
        classes, correct = _random_pool(rng, n)
        scores = rng.random(n)
        for k in range(1, n + 1):
            maj = majority_at_k(classes, correct, k, num_subsets=10_000)
            ref_mean, ref_std = brute_vote(classes, correct, k)
            assert maj.exhaustive and maj.num_subsets == math.comb(n, k)
            assert maj.mean == pytest.approx(ref_mean, abs=1e-12) and maj.std == pytest.approx(ref_std, abs=1e-12)
            wt = weighted_at_k(classes, scores, correct, k, num_subsets=10_000)
            ref_mean, ref_std = brute_vote(classes, correct, k, scores)
            assert wt.mean == pytest.approx(ref_mean, abs=1e-12) and wt.std == pytest.approx(ref_std, abs=1e-12)


def test_majority_ties_average_over_winners():
    # classes 0 (right) and 1 (wrong), one vote each at k=2 in half the subsets.
    est = majority_at_k([0, 1, 0, 1], [1, 0, 1, 0], 2, num_subsets=100)
    # 6 subsets: {00}->1, {11}->0, four mixed -> 1/2 each: mean 1/2
    assert est.mean == pytest.approx(0.5)
    assert majority_at_k([-1, -1, -1], [0, 0, 0], 2).mean == 0.0  # no answers: never right


def test_seeded_subset_estimates_match_exhaustive_within_tolerance():
    rng = np.random.default_rng(3)
    n, k = 16, 6  # 8008 subsets: enumerated here, sampled by the estimator
    classes = rng.choice([-1, 0, 1, 2, 3], size=n, p=[0.1, 0.35, 0.3, 0.15, 0.1])
    correct = (classes == 1).astype(int)
    scores = np.where(classes == 1, rng.uniform(0.4, 1.0, n), rng.uniform(0.0, 0.7, n))
    for weights, fn in ((None, lambda s: majority_at_k(classes, correct, k, num_subsets=4000, seed=s)),
                        (scores, lambda s: weighted_at_k(classes, scores, correct, k, num_subsets=4000, seed=s))):
        exact, exact_std = brute_vote(classes, correct, k, weights)
        assert 0.05 < exact < 0.95  # a pool where the estimate is not trivially 0 or 1
        est = fn(11)
        assert not est.exhaustive and est.num_subsets == 4000
        assert abs(est.mean - exact) < 4 * exact_std / math.sqrt(4000) + 1e-9
        assert est.std == pytest.approx(exact_std, rel=0.1)
        assert fn(11) == est  # seeded: reproducible
        assert fn(12).mean != est.mean  # and the seed matters


def test_subsets_are_without_replacement_and_uniform():
    idx, exhaustive = _subsets(20, 4, 4000, seed=0)  # C(20, 4) = 4845 > 4000: sampled
    assert not exhaustive and idx.shape == (4000, 4)
    assert all(len(set(row)) == 4 for row in idx.tolist())
    freq = np.bincount(idx.ravel(), minlength=20) / idx.size
    np.testing.assert_allclose(freq, 0.05, atol=0.008)
    all_idx, exhaustive = _subsets(6, 3, 4000, seed=0)
    assert exhaustive and sorted(map(tuple, all_idx.tolist())) == list(itertools.combinations(range(6), 3))


def test_vote_estimators_reject_bad_input():
    with pytest.raises(ValueError, match="one entry per sample"):
        majority_at_k([0, 1], [1], 1)
    with pytest.raises(ValueError, match=">= 0"):
        weighted_at_k([0, 1], [0.5, -0.1], [1, 0], 1)
    with pytest.raises(ValueError, match="class ids"):
        majority_at_k([0, -2], [1, 0], 1)
    outcome, _ = vote_subset_outcomes([0, 0, 1], [1, 1, 0], 3)
    assert outcome.tolist() == [1.0]


def test_power_of_two_ks():
    assert power_of_two_ks(16) == [1, 2, 4, 8, 16]
    assert power_of_two_ks(12) == [1, 2, 4, 8, 12]
    assert power_of_two_ks(1) == [1]
