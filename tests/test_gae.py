"""GAE, whitening and the clipped value loss (jaxrl_reason/rl/gae.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_reason.rl.gae import clipped_value_loss, gae, whiten


def _hand_gae(r, v, gamma, lam):
    T = len(r)
    adv = np.zeros(T)
    running = 0.0
    for t in reversed(range(T)):
        nv = v[t + 1] if t + 1 < T else 0.0
        delta = r[t] + gamma * nv - v[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv


def test_gae_matches_hand_computed_trajectory():
    r = np.array([0.0, 0.5, 0.0, 1.0])
    v = np.array([0.2, 0.4, 0.1, 0.7])
    out = gae(jnp.asarray(r)[None], jnp.asarray(v)[None], jnp.ones((1, 4)), gamma=0.9, lam=0.8)
    # Last step by hand: delta = 1.0 + 0 - 0.7 = 0.3; one before: 0 + 0.9*0.7 - 0.1 + 0.72*0.3.
    assert float(out.advantages[0, 3]) == pytest.approx(0.3, abs=1e-6)
    assert float(out.advantages[0, 2]) == pytest.approx(0.63 - 0.1 + 0.72 * 0.3, abs=1e-6)
    np.testing.assert_allclose(np.asarray(out.advantages[0]), _hand_gae(r, v, 0.9, 0.8), atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.returns[0]), _hand_gae(r, v, 0.9, 0.8) + v, atol=1e-6)


def test_gae_is_monte_carlo_return_when_gamma_lambda_one_and_skips_padding():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(3, 6)).astype(np.float32)
    v = rng.normal(size=(3, 6)).astype(np.float32)
    mask = np.ones((3, 6), np.float32)
    mask[1, :2] = 0  # a prompt span / left padding
    mask[2, 4:] = 0  # right padding
    out = jax.jit(gae)(jnp.asarray(r), jnp.asarray(v), jnp.asarray(mask))
    mc = np.flip(np.cumsum(np.flip(r * mask, 1), 1), 1)  # reward-to-go over masked tokens
    np.testing.assert_allclose(np.asarray(out.returns), mc * mask, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.advantages), (mc - v) * mask, atol=1e-5)


def test_whitening_modes():
    a = jnp.array([[1.0, 2.0, 3.0, 100.0]])
    m = jnp.array([[1.0, 1.0, 1.0, 0.0]])
    np.testing.assert_allclose(np.asarray(whiten(a, m, "none")), [[1, 2, 3, 0]])
    mb = np.asarray(whiten(a, m, "masked_batch"))
    assert mb[0, :3].mean() == pytest.approx(0.0, abs=1e-6) and mb[0, 3] == 0.0
    assert mb[0, :3].std() == pytest.approx(1.0, abs=1e-4)
    b = np.asarray(whiten(a, m, "batch"))  # the padded 100 enters the statistics
    assert b[0, :3].mean() < -0.4
    with pytest.raises(ValueError, match="masked_batch"):
        whiten(a, m, "per_row")


def test_value_loss_clips_and_lowers_value_error():
    v_old = jnp.zeros((1, 2))
    term, stats = clipped_value_loss(jnp.array([[0.5, 0.1]]), v_old, jnp.array([[1.0, 1.0]]), jnp.ones((1, 2)),
                                     jnp.zeros((1, 2), jnp.int32), clip_eps=0.2)
    # Token 0: clip(0.5) = 0.2 -> (0.8)^2 beats (0.5)^2; token 1: unclipped 0.81.
    assert float(term.value) == pytest.approx(0.5 * (0.64 + 0.81) / 2, abs=1e-6)
    assert float(stats["value/clip_frac"]) == pytest.approx(0.5)

    # A tiny linear value function fitted to fixed returns with a few Adam steps.
    rng = np.random.default_rng(1)
    feats = jnp.asarray(rng.normal(size=(4, 5, 3)), jnp.float32)
    returns = jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)
    mask = jnp.ones((4, 5)).at[0, 3:].set(0.0)
    seg = jnp.zeros((4, 5), jnp.int32)
    params = {"w": jnp.zeros((3,)), "b": jnp.zeros(())}
    opt = optax.adam(0.05)
    opt_state = opt.init(params)

    def value_fn(p):
        return feats @ p["w"] + p["b"]

    def loss(p, old):
        return clipped_value_loss(value_fn(p), old, returns, mask, seg, clip_eps=0.5,
                                  aggregation="seq_mean_token_mean")[0].value

    def mse(p):
        return float((((value_fn(p) - returns) ** 2) * mask).sum() / mask.sum())

    before = mse(params)
    for _ in range(30):
        old = jax.lax.stop_gradient(value_fn(params))
        grads = jax.grad(loss)(params, old)
        updates, opt_state = opt.update(grads, opt_state)
        params = optax.apply_updates(params, updates)
    assert mse(params) < 0.9 * before
