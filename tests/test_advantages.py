"""Advantage estimators, signal metrics and DAPO dynamic-sampling helpers against hand-computed values."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_reason.rl import advantages as adv

EPS = 1e-6
# Three groups of four: mixed, all correct (no signal), one correct.
R = np.array([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1]], np.float32)


def test_grpo_group_scale_hand_values():
    # group 0: mean 1/2, sample var = 4 * (1/2)^2 / 3 = 1/3; group 2: mean 1/4, sample var = (3/16 + 9/16) / 3 = 1/4
    s0, s2 = np.sqrt(1 / 3), 0.5
    want = np.array([
        [0.5 / (s0 + EPS), -0.5 / (s0 + EPS), -0.5 / (s0 + EPS), 0.5 / (s0 + EPS)],
        [0, 0, 0, 0],
        [-0.25 / (s2 + EPS), -0.25 / (s2 + EPS), -0.25 / (s2 + EPS), 0.75 / (s2 + EPS)],
    ])
    np.testing.assert_allclose(adv.grpo(R), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(adv.ESTIMATORS["grpo"](R), want, rtol=1e-6, atol=1e-7)


def test_grpo_population_std():
    # ddof=0: group 0 std 1/2, group 2 std sqrt(3/16)
    got = adv.grpo(R, ddof=0)
    np.testing.assert_allclose(got[0], [1, -1, -1, 1], rtol=1e-5)
    np.testing.assert_allclose(got[2], np.array([-0.25, -0.25, -0.25, 0.75]) / np.sqrt(3 / 16), rtol=1e-5)


def test_dr_grpo_is_mean_centred_only():
    want = np.array([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.25, -0.25, -0.25, 0.75]])
    np.testing.assert_allclose(adv.grpo(R, scale="none"), want, atol=1e-7)
    np.testing.assert_allclose(adv.ESTIMATORS["dr_grpo"](R), want, atol=1e-7)


def test_grpo_batch_std():
    # 7 ones and 5 zeros over the batch: mean 7/12, sample var = (7 (5/12)^2 + 5 (7/12)^2) / 11
    sb = np.sqrt((7 * (5 / 12) ** 2 + 5 * (7 / 12) ** 2) / 11)
    want = np.array([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.25, -0.25, -0.25, 0.75]]) / (sb + EPS)
    np.testing.assert_allclose(adv.grpo(R, scale="batch"), want, rtol=1e-5)


def test_rloo_leave_one_out():
    want = np.array([
        [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3],
        [0, 0, 0, 0],
        [0 - 1 / 3, 0 - 1 / 3, 0 - 1 / 3, 1 - 0],
    ])
    got = adv.rloo(R)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(np.asarray(got[1]) == 0.0)  # exactly zero, not rounding noise


def test_reinforce_pp_whitens_centred_values():
    # centred values over the signal groups: .5,-.5,-.5,.5,-.25,-.25,-.25,.75 -> mean 0, sample var 1.75/7 = 1/4
    want = np.array([[1, -1, -1, 1], [0, 0, 0, 0], [-0.5, -0.5, -0.5, 1.5]])
    np.testing.assert_allclose(adv.reinforce_pp(R), want, rtol=1e-5, atol=1e-6)


def test_all_equal_non_binary_group_is_exactly_zero():
    # 0.1 * 3 / 3 != 0.1 in float32; a std-based rule would turn that rounding into a large advantage.
    r = np.array([[0.1, 0.1, 0.1], [0.7, 0.7, 0.7]], np.float32)
    for name in adv.ESTIMATORS:
        assert np.all(np.asarray(adv.ESTIMATORS[name](r)) == 0.0), name


def test_ragged_groups_via_valid():
    # Invalid slots hold junk (7, 9, NaN) that must not leak into means or stds.
    r = np.array([[1, 0, 7, np.nan], [1, 1, 0, 9], [1, np.nan, 3, 3]], np.float32)
    v = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], bool)
    g = np.asarray(adv.grpo(r, v))
    # group 0: {1, 0}: mean 1/2, sample std sqrt(1/2); group 1: {1, 1, 0}: mean 2/3, sample var (1/9+1/9+4/9)/2
    s1 = np.sqrt(1 / 3)
    np.testing.assert_allclose(g[0], [0.5 / (np.sqrt(0.5) + EPS), -0.5 / (np.sqrt(0.5) + EPS), 0, 0], rtol=1e-5)
    np.testing.assert_allclose(g[1], [1 / 3 / (s1 + EPS), 1 / 3 / (s1 + EPS), -2 / 3 / (s1 + EPS), 0], rtol=1e-5)
    np.testing.assert_array_equal(g[2], 0.0)  # a singleton group has no baseline
    rl = np.asarray(adv.rloo(r, v))
    np.testing.assert_allclose(rl[0], [1, -1, 0, 0], atol=1e-6)
    np.testing.assert_allclose(rl[1], [1 - 1 / 2, 1 - 1 / 2, 0 - 1, 0], atol=1e-6)
    np.testing.assert_array_equal(rl[2], 0.0)
    assert np.all(np.isfinite(np.asarray(adv.reinforce_pp(r, v))))
    m = adv.group_metrics(r, v, advantages=g)
    assert float(m["zero_signal_groups"]) == 1.0
    np.testing.assert_allclose(m["group_size_mean"], 6 / 3)
    np.testing.assert_allclose(m["reward_mean"], 4 / 6, rtol=1e-6)


def test_group_metrics_counts_zero_signal_groups():
    m = adv.group_metrics(R)
    assert float(m["zero_signal_groups"]) == 1.0
    np.testing.assert_allclose(m["zero_signal_frac"], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(m["reward_mean"], 7 / 12, rtol=1e-6)
    np.testing.assert_allclose(m["reward_std"], np.std(R), rtol=1e-5)
    a = adv.grpo(R, scale="none")
    m = adv.group_metrics(R, advantages=a)
    np.testing.assert_allclose(m["advantage_abs_mean"], np.abs(np.asarray(a)).mean(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(adv.zero_signal_groups(R)), [False, True, False])


def test_estimators_jit_and_dispatch_by_name():
    f = jax.jit(lambda r, v: adv.ESTIMATORS["rloo"](r, v))
    np.testing.assert_allclose(f(R, jnp.ones(R.shape, bool)), adv.rloo(R), atol=1e-7)
    np.testing.assert_allclose(adv.compute_advantages("grpo", R, scale="none"), adv.grpo(R, scale="none"))


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo2'"):
        adv.get_estimator("ppo2")
    with pytest.raises(ValueError, match="scale must be"):
        adv.grpo(R, scale="token")
    with pytest.raises(ValueError, match="valid has shape"):
        adv.grpo(R, np.ones((3, 3), bool))
    with pytest.raises(ValueError, match=r"\[queries, group\]"):
        adv.rloo(np.ones((4,)))


def test_zero_signal_groups_decide_dynamic_sampling():
    rewards = np.array([[1, 1], [0, 1], [0, 0]], np.float32)
    np.testing.assert_array_equal(np.asarray(adv.zero_signal_groups(rewards)), [True, False, True])
    # a group of one valid member, or equal valid members, carries no signal whatever its padding holds
    valid = np.array([[1, 0], [1, 1], [1, 1]], bool)
    np.testing.assert_array_equal(np.asarray(adv.zero_signal_groups(np.array([[1, 0], [2, 2], [0, 5]]), valid)),
                                  [True, True, False])
    assert np.asarray(adv.zero_signal_groups(np.array([[0.0, 0.1]]), atol=0.2)).all()
