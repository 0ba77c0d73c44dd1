"""Every verl policy loss (`rl.policy_losses`): a written-out NumPy (float64) restatement of each verl function
checked against the library's float32 values and `jax.grad` gradients on ragged batches with extreme log-ratios;
one contract test over all of them (finite, masked slots inert, micro-batch accumulation exact, selectable from the
config); one behaviour test per loss in its predicted direction.

The reference side calls nothing of the library: verl's per-token loss matrices, their derivatives w.r.t. the
token log-prob (what torch autograd gives, stop-gradients included) and verl's `agg_loss` are written out below.
Clip-Cov's selection is the library's documented choice (the k largest covariances among verl's candidates)
where verl draws the k at random; everything else is verl's.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_reason.rl import batch as tb
from jaxrl_reason.rl import losses as L
from jaxrl_reason.rl import policy_losses as P

B, T = 7, 18


def _ragged(seed=0, extreme=True):
    """One sequence per row (as verl lays rows out): ragged prompts/completions, a row with no trained token,
    log-ratios up to +-19 on a fifth of the tokens, probabilities from ~1 down to e^-25."""
    rng = np.random.default_rng(seed)
    seg = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.float32)
    for r in range(B):
        p = int(rng.integers(1, 4))
        c = 0 if r == 3 else int(rng.integers(1, T - p + 1))
        seg[r, :p + c] = 1
        mask[r, p:p + c] = 1.0
    mask[0, 1:3] = 1.0  # row 0: make sure some row is long
    seg[0, :3] = 1
    old = -rng.uniform(0.0, 6.0, (B, T))
    very = rng.random((B, T)) < 0.15
    old[very] = -rng.uniform(19.0, 24.0, very.sum())  # room for a log-ratio of +19 below log p = 0
    lr = rng.normal(0.0, 0.3, (B, T))
    if extreme:
        ext = rng.random((B, T)) < 0.2
        lr[ext] = rng.choice([-19.0, -15.0, -8.0, -3.0, 3.0, 8.0, 15.0, 19.0], ext.sum())
    lp = np.minimum(old + lr, -1e-4)
    adv = np.repeat(rng.normal(0.0, 1.0, (B, 1)), T, axis=1)
    adv[5] = 0.0  # a row with zero advantage
    adv = np.where(mask > 0, adv, 0.0)
    lp, old = np.where(mask > 0, lp, 0.0), np.where(mask > 0, old, 0.0)
    batch = tb.TokenBatch(tokens=np.ones((B, T), np.int32), positions=np.zeros((B, T), np.int32),
                          segment_ids=seg, loss_mask=mask, advantages=adv.astype(np.float32),
                          old_logprobs=old.astype(np.float32), ref_logprobs=None,
                          task_id=np.full((B,), tb.TASKS["solve"], np.int32))
    return batch, lp.astype(np.float32)


# ----------------------------------------------------------------------------------------------------------------
# The NumPy restatement of verl (float64): per-token loss matrix Lm and dLm/dlogp G (autograd's, stop-grads kept)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_vanilla(lp, old, A, m, eps_low=0.2, eps_high=0.2, c=3.0):
    raw = lp - old
    nk = np.clip(raw, -20, 20)
    inside = (raw > -20) & (raw < 20)
    r = np.exp(nk)
    l1, l2 = -A * r, -A * np.clip(r, 1 - eps_low, 1 + eps_high)
    g1 = -A * r * inside
    g2 = np.where((r > 1 - eps_low) & (r < 1 + eps_high), g1, 0.0)
    c1, gc1 = np.where(l2 > l1, l2, l1), np.where(l2 > l1, g2, g1)
    l3 = -A * c
    c2, gc2 = np.where(l3 < c1, l3, c1), np.where(l3 < c1, 0.0, gc1)
    return np.where(A < 0, c2, c1), np.where(A < 0, gc2, gc1)


def ref_gspo(lp, old, A, m, eps_low=3e-4, eps_high=4e-4):
    n = np.maximum(m.sum(-1, keepdims=True), 1)
    seq = ((lp - old) * m).sum(-1, keepdims=True) / n
    log_s = np.minimum(seq, 10.0) * np.ones_like(lp)
    s = np.exp(log_s)
    ds = s * (seq < 10.0)  # d s / d logp_t through the lp - sg(lp) term
    l1, l2 = -A * s, -A * np.clip(s, 1 - eps_low, 1 + eps_high)
    g1 = -A * ds
    g2 = np.where((s > 1 - eps_low) & (s < 1 + eps_high), g1, 0.0)
    return np.where(l2 > l1, l2, l1), np.where(l2 > l1, g2, g1)


def ref_sapo(lp, old, A, m, tau_pos=1.0, tau_neg=1.05):
    raw = lp - old
    r = np.exp(np.clip(raw, -20, 20))
    tau = np.where(A > 0, tau_pos, tau_neg)
    s = _sig(tau * (r - 1))
    return -s * 4 / tau * A, -A * 4 * s * (1 - s) * r * ((raw > -20) & (raw < 20))


def ref_gpg(lp, old, A, m):
    return -lp * A, -A


def _cov(lp, A, m):
    n = m.sum()
    return (A - (A * m).sum() / n) * (lp - (lp * m).sum() / n)


def _largest(score, cand, k):
    idx = np.flatnonzero(cand.reshape(-1))
    order = idx[np.argsort(-score.reshape(-1)[idx], kind="stable")][:k]
    sel = np.zeros(score.size, bool)
    sel[order] = True
    return sel.reshape(score.shape)


def ref_clip_cov(lp, old, A, m, eps_low=0.2, eps_high=0.2, clip_cov_ratio=2e-4, clip_cov_lb=1.0, clip_cov_ub=5.0):
    r = np.exp(lp - old)
    l1, l2 = -A * r, -A * np.clip(r, 1 - eps_low, 1 + eps_high)
    g1 = -A * r
    g2 = np.where((r > 1 - eps_low) & (r < 1 + eps_high), g1, 0.0)
    by_origin = (l2 > l1) & (m > 0)
    cov = _cov(lp, A, m)
    cand = (cov < clip_cov_ub) & (cov > clip_cov_lb) & (m > 0) & ~by_origin
    k = max(int(clip_cov_ratio * m.sum()), 1)
    corr = 1.0 - _largest(cov, cand, k)
    return np.where(l2 > l1, l2, l1) * corr, np.where(l2 > l1, g2, g1) * corr


def ref_kl_cov(lp, old, A, m, kl_cov_ratio=2e-4, ppo_kl_coef=0.1):
    raw = lp - old
    r = np.exp(raw)
    cov = _cov(lp, A, m)
    k = max(1, int(m.sum() * kl_cov_ratio))
    sel = _largest(cov, m > 0, k)
    return -A * r + sel * ppo_kl_coef * np.abs(raw), -A * r + sel * ppo_kl_coef * np.sign(raw)


def ref_cispo(lp, old, A, m, eps_low=1.0, eps_high=0.2):
    r = np.exp(np.clip(lp - old, -20, 20))
    w = np.clip(r, 1 - eps_low, 1 + eps_high)
    return -w * A * lp, -w * A


def _dppo(lp, old, A, keep, c):
    r = np.exp(np.clip(lp - old, -20, 20))
    w = np.minimum(r, c)
    return -A * w * lp * keep, -A * w * keep


def ref_dppo_tv(lp, old, A, m, eps_low=0.2, eps_high=0.2, clip_ratio_c=20.0):
    p, q = np.exp(lp), np.exp(old)
    keep = np.where(A > 0, (p - q) <= eps_high, (p - q) >= -eps_low)
    return _dppo(lp, old, A, keep, clip_ratio_c)


def ref_dppo_kl(lp, old, A, m, eps_low=0.2, eps_high=0.2, clip_ratio_c=20.0):
    p, q = np.exp(lp), np.exp(old)
    d = q * (old - lp) + (1 - q) * np.log((1 - q + 1e-8) / (1 - p + 1e-8))
    keep = np.where(A > 0, (d <= eps_high) | (p <= q), (d <= eps_low) | (p >= q))
    return _dppo(lp, old, A, keep, clip_ratio_c)


def ref_dro(lp, old, A, m, dro_beta=0.1):
    raw = lp - old
    return -(lp * A - 0.5 * dro_beta * raw**2), -A + dro_beta * raw


def ref_geo_mean(lp, old, A, m, eps_low=0.4, eps_high=0.4):
    """verl's GMPO: a loss per row (torch.mean over rows), so it returns (loss, dloss/dlogp) directly."""
    raw = lp - old
    sgn = np.sign(A)
    clamp = np.clip(raw, -eps_low, eps_high)
    pick_raw = sgn * raw <= sgn * clamp  # min picks the raw log-ratio (derivative 1)
    mval = sgn * np.minimum(sgn * raw, sgn * clamp)
    dm = np.where(pick_raw, 1.0, ((raw > -eps_low) & (raw < eps_high)).astype(float)) * (sgn != 0)
    n = m.sum(-1, keepdims=True)
    rho = np.exp((mval * m).sum(-1, keepdims=True) / (n + 1e-8))
    abar = (A * m).sum(-1, keepdims=True) / (n + 1e-8)
    rows = (n[:, 0] > 0)  # verl averages over all rows; ours over sequences with a trained token (documented)
    loss = (-abar * rho)[rows].sum() / rows.sum()
    grad = -abar * rho * dm * m / (n + 1e-8) / rows.sum()
    return loss, grad


def verl_agg(Lm, G, m, agg):
    """verl's agg_loss and its derivative for a loss that is local per token."""
    if agg == "token_mean":
        w = m / m.sum()
    else:
        n = m.sum(-1, keepdims=True)
        w = m / (n + 1e-8) / (n[:, 0] > 0).sum()
    return (Lm * w).sum(), G * w


REFS = {"ppo_clip": (ref_vanilla, dict(dual_clip=3.0)), "gspo": (ref_gspo, {}), "sapo": (ref_sapo, {}),
        "gpg": (ref_gpg, {}), "clip_cov": (ref_clip_cov, dict(clip_cov_ratio=0.05, clip_cov_lb=0.05,
                                                              clip_cov_ub=3.0)),
        "kl_cov": (ref_kl_cov, dict(kl_cov_ratio=0.05)), "geo_mean": (ref_geo_mean, {}),
        "cispo": (ref_cispo, {}), "dppo_tv": (ref_dppo_tv, {}), "dppo_kl": (ref_dppo_kl, {}),
        "dro": (ref_dro, {})}
# verl forces seq-mean-token-mean for gspo and sapo and a per-row mean for geo_mean; the rest take loss_agg_mode.
SEQ_ONLY = ("gspo", "sapo", "geo_mean")
CASES = [(n, a) for n in P.POLICY_LOSSES for a in ("token_mean", "seq_mean_token_mean")
         if not (n in SEQ_ONLY and a == "token_mean")]


def test_registry_covers_every_verl_loss():
    verl = {"vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "dppo_tv", "dppo_kl", "dro"}
    assert {P.VERL_NAMES.get(n, n) for n in verl} == set(P.POLICY_LOSSES) == set(REFS)
    for n in P.POLICY_LOSSES:
        assert n in L.TERM_KINDS


@functools.partial(jax.jit, static_argnums=2)
def _value_grad(lp, batch, terms):
    return jax.value_and_grad(lambda x: L.objective(x, batch, terms)[0])(lp)


@pytest.mark.parametrize("name,agg", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_numpy_restatement_of_verl(name, agg, seed):
    batch, lp = _ragged(seed)
    ref, knobs = REFS[name]
    terms = (P.policy_spec(name, "solve", aggregation=agg, **knobs),)
    val, grad = _value_grad(jnp.asarray(lp), batch, terms)
    f64 = lambda x: np.asarray(x, np.float64)
    m, A, old = f64(batch.loss_mask), f64(batch.advantages), f64(batch.old_logprobs)
    rk = {k.replace("dual_clip", "c"): v for k, v in knobs.items()}
    if name == "geo_mean":
        want, want_g = ref(f64(lp), old, A, m, **rk)
    else:
        Lm, G = ref(f64(lp), old, A, m, **rk)
        want, want_g = verl_agg(np.where(m > 0, Lm, 0.0), np.where(m > 0, G, 0.0), m, agg)
    # float32 carries ~1e-7 of the largest contribution (ratios up to e^19), not of the sum
    scale = max(1.0, float(np.max(np.abs(want_g))))
    np.testing.assert_allclose(float(val), want, rtol=1e-5, atol=1e-5 * scale * m.sum())
    np.testing.assert_allclose(np.asarray(grad), want_g, rtol=1e-5, atol=1e-5 * scale)


# ----------------------------------------------------------------------------------------------------------------
# The contract every policy loss keeps


def _packed(seed=3):
    """Two tasks, a row packing two sequences, a filler row; NaN garbage in every untrained slot."""
    batch, lp = _ragged(seed, extreme=True)
    seg, mask = batch.segment_ids.copy(), batch.loss_mask.copy()
    seg[3, :] = 0
    seg[3, :4], seg[3, 4:10] = 1, 2
    mask[3, :] = 0
    mask[3, 1:4], mask[3, 6:10] = 1.0, 1.0
    adv = batch.advantages.copy()
    adv[3, 1:4], adv[3, 6:10] = 0.7, -1.3
    task = batch.task_id.copy()
    task[1] = task[4] = tb.TASKS["guided_solve"]
    task[6] = tb.PAD_TASK_ID
    mask[6] = 0.0
    garbage = lambda x: np.where(mask > 0, x, np.nan).astype(np.float32)
    b = batch._replace(segment_ids=seg, loss_mask=mask, advantages=garbage(adv),
                       old_logprobs=garbage(np.where(mask > 0, batch.old_logprobs, -1.0)), task_id=task)
    lp = np.where(mask > 0, np.minimum(lp, -1e-3), -2.0).astype(np.float32)
    return b, lp


@functools.partial(jax.jit, static_argnums=(2, 3))
def _full_and_micro(lp, batch, terms, n_micro):
    full = jax.value_and_grad(lambda x: L.objective(x, batch, terms), has_aux=True)(lp)
    counts = L.batch_counts(batch)
    rows = batch.batch_size // n_micro
    loss, grads, metrics = 0.0, [], None
    for i in range(n_micro):
        sl = slice(i * rows, (i + 1) * rows)
        mb = jax.tree.map(lambda x: x[sl], batch)
        (l, mm), g = jax.value_and_grad(lambda x: L.objective(x, mb, terms, counts=counts), has_aux=True)(lp[sl])
        loss, metrics = loss + l, mm if metrics is None else jax.tree.map(jnp.add, metrics, mm)
        grads.append(g)
    return full, (loss, jnp.concatenate(grads), metrics)


@pytest.mark.parametrize("name", P.POLICY_LOSSES)
def test_contract_finite_inert_exact_accumulation(name):
    batch, lp = _packed()
    batch = jax.tree.map(lambda x: x[:6], batch)  # 6 rows: 3 micro-batches of 2
    lp = lp[:6]
    terms = (P.policy_spec(name, ("solve", "guided_solve"), aggregation="seq_mean_token_mean"),)
    (val, m), g = _value_grad_aux(jnp.asarray(lp), batch, terms)
    assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(g)))
    assert all(np.isfinite(float(v)) for v in m.values())
    # masked slots: no gradient; their garbage changes nothing
    assert np.all(np.asarray(g)[batch.loss_mask == 0] == 0.0)
    clean = batch._replace(advantages=np.nan_to_num(batch.advantages, nan=5.0),
                           old_logprobs=np.nan_to_num(batch.old_logprobs, nan=-30.0))
    (val2, _), g2 = _value_grad_aux(jnp.asarray(lp), clean, terms)
    np.testing.assert_array_equal(np.asarray(val2), np.asarray(val))
    np.testing.assert_array_equal(np.asarray(g2), np.asarray(g))
    if name in P.BATCH_COUPLED:
        return  # their token selection reads the micro-batch they are given, as verl's does
    ((fv, fm), fg), (av, ag, am) = _full_and_micro(jnp.asarray(lp), batch, terms, 3)
    np.testing.assert_allclose(float(av), float(fv), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ag), np.asarray(fg), rtol=1e-5, atol=1e-6 * max(1, np.abs(fg).max()))
    for k in fm:
        np.testing.assert_allclose(float(am[k]), float(fm[k]), rtol=1e-4, atol=1e-6, err_msg=k)


@functools.partial(jax.jit, static_argnums=2)
def _value_grad_aux(lp, batch, terms):
    return jax.value_and_grad(lambda x: L.objective(x, batch, terms), has_aux=True)(lp)


@pytest.mark.parametrize("name", P.POLICY_LOSSES)
def test_selectable_from_config_and_composes_with_methods(name):
    from jaxrl_reason.methods import make_method

    knobs = P.policy_loss_knobs(name)
    section = {"name": "cure", "policy_loss": name}
    if knobs:
        k, v = sorted(knobs.items())[0]
        section["policy_loss_kwargs"] = {k: v * 0.5}
    cure = make_method(section)
    pol = [t for t in cure.terms() if t.kind not in ("kl",)]
    assert {t.kind for t in pol} == {name} and len(pol) == 3  # solve, critique, guided_solve
    if knobs:
        assert dict(pol[0].options)[k] == pytest.approx(v * 0.5)
    for method in ("rlv", "cipo"):
        kinds = {t.kind for t in make_method({"name": method, "policy_loss": name}).terms()}
        assert name in kinds and (name == "ppo_clip" or "ppo_clip" not in kinds)


def test_config_refuses_bad_policy_loss_input():
    from jaxrl_reason.knobs import UnknownKnobError
    from jaxrl_reason.methods import make_method

    with pytest.raises(ValueError, match=r"method.policy_loss='gsop' is unknown"):
        make_method({"name": "grpo", "policy_loss": "gsop"})
    with pytest.raises(UnknownKnobError, match=r"method.policy_loss_kwargs.eps_hihg .*eps_high"):
        make_method({"name": "grpo", "policy_loss": "gspo", "policy_loss_kwargs": {"eps_hihg": 1e-3}})
    with pytest.raises(ValueError, match=r"method.eps_high is PPO-clip's knob.*policy_loss_kwargs"):
        make_method({"name": "grpo", "policy_loss": "cispo", "eps_high": 0.3})
    with pytest.raises(UnknownKnobError, match=r"PPO-clip's knobs are method.eps_low"):
        make_method({"name": "grpo", "policy_loss_kwargs": {"eps_low": 0.1}})
    assert make_method({"name": "grpo", "policy_loss": "vanilla"}).terms()[0].kind == "ppo_clip"


# ----------------------------------------------------------------------------------------------------------------
# Behaviour: each loss does what it is for


def _rows(lrs, advs, lp=-1.0):
    """One row per list of per-token log-ratios; row advantage advs[i]; every listed token trained."""
    n = max(len(x) for x in lrs) + 1
    b = len(lrs)
    mask, seg = np.zeros((b, n), np.float32), np.zeros((b, n), np.int32)
    old = np.zeros((b, n), np.float32)
    lps = np.zeros((b, n), np.float32)
    adv = np.zeros((b, n), np.float32)
    for i, x in enumerate(lrs):
        seg[i, :len(x) + 1] = 1
        mask[i, 1:len(x) + 1] = 1
        lps[i, 1:len(x) + 1] = lp
        old[i, 1:len(x) + 1] = lp - np.asarray(x, np.float32)
        adv[i, 1:len(x) + 1] = advs[i]
    batch = tb.TokenBatch(np.ones((b, n), np.int32), np.zeros((b, n), np.int32), seg, mask, adv, old, None,
                          np.full((b,), tb.TASKS["solve"], np.int32))
    return batch, lps


def _g(name, batch, lp, agg="seq_mean_token_mean", **knobs):
    terms = (P.policy_spec(name, "solve", aggregation=agg, **knobs),)
    return np.asarray(_value_grad(jnp.asarray(lp), batch, terms)[1])


def test_gspo_clips_whole_sequences():
    # row 0: every token's ratio is tiny (1e-4 each way) but the sequence's mean log-ratio is 1e-3 > eps_high:
    # the whole sequence is clipped. Row 1: one token's ratio is e^2 (PPO-clip drops it) but the mean is ~0:
    # GSPO keeps every token's gradient, that one's included.
    batch, lp = _rows([[1e-3] * 4, [2.0, -0.6, -0.7, -0.7]], [1.0, 1.0])
    g = _g("gspo", batch, lp)
    assert np.all(g[0] == 0.0)
    assert np.all(g[1][batch.loss_mask[1] > 0] < 0)
    assert _g("ppo_clip", batch, lp)[1, 1] == 0.0


def test_cispo_keeps_gradient_of_clipped_tokens():
    batch, lp = _rows([[0.5, 0.0]], [1.0])  # ratio e^0.5 > 1 + eps_high: PPO-clip zeroes the token
    assert _g("ppo_clip", batch, lp)[0, 1] == 0.0
    g = _g("cispo", batch, lp, agg="token_mean")
    np.testing.assert_allclose(g[0, 1:3], [-1.2 / 2, -1.0 / 2], rtol=1e-6)  # the weight is capped, not removed


def test_sapo_gate_decays_smoothly_and_faster_for_negative_advantages():
    batch, lp = _rows([[0.0], [0.4], [0.0], [0.4]], [1.0, 1.0, -1.0, -1.0])
    # |gradient| / the unclipped importance-weighted one (|A| r / n): SAPO's soft trust-region weight
    g = np.abs(_g("sapo", batch, lp, agg="token_mean")[:, 1]) * 4 / np.exp([0.0, 0.4, 0.0, 0.4])
    np.testing.assert_allclose(g[[0, 2]], 1.0, rtol=1e-6)  # = the policy gradient at r = 1
    assert 0 < g[1] < g[0] and 0 < g[3] < g[2]  # off-policy tokens keep a shrinking gradient (PPO-clip: 0)
    assert g[3] / g[2] < g[1] / g[0]  # tau_neg > tau_pos: negative-advantage tokens are gated harder
    assert _g("ppo_clip", batch, lp, agg="token_mean")[1, 1] == 0.0


def test_gpg_ignores_the_ratio():
    batch, lp = _rows([[3.0, -3.0, 0.0]], [0.5])
    np.testing.assert_allclose(_g("gpg", batch, lp, agg="token_mean")[0, 1:4], -0.5 / 3, rtol=1e-6)


def test_clip_cov_and_kl_cov_act_on_the_highest_covariance_tokens():
    # Two rows, A = +1 and -1; token log-probs differ so that covariances differ; on-policy (ratio 1).
    batch, lp = _rows([[0.0] * 4, [0.0] * 4], [1.0, -1.0])
    lp = lp.copy()
    lp[0, 1:5] = [-0.1, -0.5, -1.0, -3.0]
    lp[1, 1:5] = [-0.2, -0.6, -2.0, -4.0]
    batch = batch._replace(old_logprobs=np.where(batch.loss_mask > 0, lp, 0.0).astype(np.float32))
    base = _g("ppo_clip", batch, lp, agg="token_mean")
    m = batch.loss_mask > 0
    A = batch.advantages
    cov = (A - A[m].mean()) * (lp - lp[m].mean())
    top = np.unravel_index(np.argmax(np.where(m, cov, -np.inf)), cov.shape)
    g = _g("clip_cov", batch, lp, agg="token_mean", clip_cov_ratio=0.1, clip_cov_lb=0.0, clip_cov_ub=10.0)
    assert g[top] == 0.0 and base[top] != 0.0  # the top-covariance token loses its gradient
    others = m.copy()
    others[top] = False
    np.testing.assert_allclose(g[others], base[others], rtol=1e-6)
    # KL-Cov: move the policy off the old one; the selected token is pulled back by coef * sign(lr)
    off = batch._replace(old_logprobs=np.where(m, lp - 0.3, 0.0).astype(np.float32))
    gk = _g("kl_cov", off, lp, agg="token_mean", kl_cov_ratio=0.1, ppo_kl_coef=1.0)
    gv = _g("gpg", off, lp, agg="token_mean") * np.exp(0.3)  # -A r / n
    np.testing.assert_allclose(gk[top] - gv[top], 1.0 / m.sum(), rtol=1e-5)
    np.testing.assert_allclose(gk[others], gv[others], rtol=1e-5)


def test_geo_mean_is_less_sensitive_to_an_outlier_ratio():
    # A < 0, one token's ratio e^3 among 7 on-policy ones: the arithmetic surrogate (PPO-clip without dual clip)
    # moves by (e^3 - 1) / 8, the geometric one by exp(3 / 8) - 1.
    outlier, clean = _rows([[3.0] + [0.0] * 7], [-1.0]), _rows([[0.0] * 8], [-1.0])

    def loss(name, case):
        terms = (P.policy_spec(name, "solve", aggregation="seq_mean_token_mean"),)
        return float(_value_grad(jnp.asarray(case[1]), case[0], terms)[0])

    d_geo = loss("geo_mean", outlier) - loss("geo_mean", clean)
    d_ppo = loss("ppo_clip", outlier) - loss("ppo_clip", clean)
    np.testing.assert_allclose(d_geo, np.exp(3 / 8) - 1, rtol=1e-5)
    np.testing.assert_allclose(d_ppo, (np.exp(3) - 1) / 8, rtol=1e-5)
    assert d_geo < d_ppo / 5


def test_dppo_trust_region_is_on_probabilities_not_ratios():
    # Token 1: p_old = 1e-4 -> p = 1e-3 (ratio 10, |dp| ~ 1e-3): PPO-clip drops it, DPPO keeps it.
    # Token 2: p_old = 0.3 -> p = 0.7 (ratio 2.3, dp = 0.4, binary KL 0.34, both > 0.2): both drop it.
    # Token 3: p_old = 0.5 -> p = 0.55 (ratio 1.1, dp = 0.05): both keep it.
    lp = np.log(np.array([[1.0, 1e-3, 0.7, 0.55]], np.float32))
    old = np.log(np.array([[1.0, 1e-4, 0.3, 0.5]], np.float32))
    batch, _ = _rows([[0.0] * 3], [1.0])
    batch = batch._replace(old_logprobs=np.where(batch.loss_mask > 0, old, 0.0).astype(np.float32))
    ppo = _g("ppo_clip", batch, lp, agg="token_mean")[0]
    for name in ("dppo_tv", "dppo_kl"):
        g = _g(name, batch, lp, agg="token_mean")[0]
        assert ppo[1] == 0.0 and g[1] < 0.0, name
        assert g[2] == 0.0 and ppo[2] == 0.0, name
        assert g[3] < 0.0 and ppo[3] < 0.0, name


def test_dro_pulls_back_toward_the_old_policy():
    batch, lp = _rows([[0.5], [-0.5]], [0.0, 0.0])
    g = _g("dro", batch, lp, agg="token_mean", dro_beta=0.2)[:, 1]
    np.testing.assert_allclose(g, [0.2 * 0.5 / 2, -0.2 * 0.5 / 2], rtol=1e-5)  # descent moves lr toward 0


def test_run_config_carries_policy_loss_and_distill_sections():
    from jaxrl_reason.experiment.config import default_config, read_run_config, run_config_dict

    c = default_config()
    c.method.policy_loss = "gspo"
    c.method.policy_loss_kwargs = {"eps_high": 1e-3}
    c.method.distill.teacher = "/some/teacher"
    rc = read_run_config(c)
    assert rc.method.loss.policy_loss == "gspo" and rc.method.loss.policy_loss_kwargs == {"eps_high": 1e-3}
    assert rc.method.distill.teacher == "/some/teacher"
    back = run_config_dict(rc)["method"]
    assert back["policy_loss"] == "gspo" and back["distill"]["teacher"] == "/some/teacher"
