"""TokenBatch helpers, log-probs, loss terms, aggregations and the objective.

The stand-in models are tiny plain-JAX functions; the loss code never sees them, only their log-probs.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl_reason.rl import batch as tb
from jaxrl_reason.rl import losses as L
from jaxrl_reason.rl import scoring as S

V = 12  # vocabulary of the stand-in models


# ----------------------------------------------------------------------------------------------------------------
# Stand-in models


# numpy RNG for test data: jax.random's threefry costs seconds of XLA compile per new shape on CPU.
def _normal(seed, shape, scale=1.0):
    return jnp.asarray(scale * np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _ints(seed, shape, high=V):
    return jnp.asarray(np.random.default_rng(seed).integers(0, high, size=shape), jnp.int32)


def table_init(seed):
    """A bigram table: logits[t] = table[tokens[t]]. Each predictor token owns its row, so the effect of an
    update on one target token is not blurred by other positions (when the predictors differ)."""
    return {"table": _normal(seed, (V, V), 0.1)}


def table_logits(params, tokens):
    return params["table"][tokens]


def mlp_init(seed, d=8):
    return {"emb": _normal(seed, (V, d)), "out": _normal(seed + 1, (d, V), 0.5), "bias": jnp.zeros(V)}


def mlp_logits(params, tokens):
    # Mixes in the previous token so a position depends on context, not only on its own token.
    e = params["emb"][tokens]
    prev = jnp.concatenate([jnp.zeros_like(e[:, :1]), e[:, :-1]], axis=1)
    return jnp.tanh(e + 0.5 * prev) @ params["out"] + params["bias"]


@functools.partial(jax.jit, static_argnums=0)
def _model_logprobs(logits_fn, params, tokens):
    return S.next_token_logprobs(logits_fn(params, tokens), tokens)


def model_logprobs(logits_fn, params, batch):
    return _model_logprobs(logits_fn, params, jnp.asarray(batch.tokens))


# Eager op-by-op dispatch is slow on a loaded CPU; one compiled program per shape keeps the file fast.
objective = jax.jit(L.objective, static_argnums=2)


def seq_logprob(logits_fn, params, batch):
    return np.asarray(jnp.sum(model_logprobs(logits_fn, params, batch) * batch.loss_mask, axis=1))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _grad(logits_fn, params, batch, terms):
    def loss_fn(p):
        return L.objective(S.next_token_logprobs(logits_fn(p, batch.tokens), batch.tokens), batch, terms)[0]

    return jax.grad(loss_fn)(params)


def one_step(logits_fn, params, batch, terms, lr=0.1, opt=optax.sgd):
    tx = opt(lr)
    grads = _grad(logits_fn, params, batch, terms)
    updates, _ = tx.update(grads, tx.init(params), params)
    return optax.apply_updates(params, updates)


def on_policy(logits_fn, params, batch):
    """Sets old_logprobs to the current policy's, as the sampler would have reported them."""
    lp = np.asarray(model_logprobs(logits_fn, params, batch)) * batch.loss_mask
    return batch._replace(old_logprobs=lp.astype(np.float32))


# ----------------------------------------------------------------------------------------------------------------
# TokenBatch


def test_build_token_batch_layout_and_shift_convention():
    b = tb.build_token_batch(
        prompts=[[1, 2, 3], [4, 5]],
        completions=[[6, 7], [8, 9, 10]],
        advantages=[0.5, [1.0, 2.0, 3.0]],
        old_logprobs=[[-0.1, -0.2], [-0.3, -0.4, -0.5]],
        task=["solve", "critique"],
        ref_logprobs=[[-1.0, -2.0], [-3.0, -4.0, -5.0]],
        length=8,
    )
    np.testing.assert_array_equal(b.tokens, [[1, 2, 3, 6, 7, 0, 0, 0], [4, 5, 8, 9, 10, 0, 0, 0]])
    np.testing.assert_array_equal(b.positions, [[0, 1, 2, 3, 4, 0, 0, 0], [0, 1, 2, 3, 4, 0, 0, 0]])
    np.testing.assert_array_equal(b.segment_ids, [[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    # The mask and per-token values sit on the completion (target) tokens themselves.
    np.testing.assert_array_equal(b.loss_mask, [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0]])
    np.testing.assert_allclose(b.advantages, [[0, 0, 0, .5, .5, 0, 0, 0], [0, 0, 1, 2, 3, 0, 0, 0]])
    np.testing.assert_allclose(b.old_logprobs[1, 2:5], [-0.3, -0.4, -0.5])
    np.testing.assert_allclose(b.ref_logprobs[0, 3:5], [-1.0, -2.0])
    np.testing.assert_array_equal(b.task_id, [tb.TASKS["solve"], tb.TASKS["critique"]])
    assert b.tokens.dtype == np.int32 and b.loss_mask.dtype == np.float32
    # Default length: the smallest bucket that fits.
    assert tb.build_token_batch([[1]], [[2, 3]], [1.0], None, "solve", buckets=(4, 8)).length == 4


def test_build_token_batch_rejects_bad_input():
    with pytest.raises(ValueError, match=r"advantages\[0\] has 2 entries but completion 0 has 3"):
        tb.build_token_batch([[1]], [[2, 3, 4]], [[1.0, 2.0]], None, "solve")
    with pytest.raises(ValueError, match=r"prompts\[0\] is empty"):
        tb.build_token_batch([[]], [[2]], [1.0], None, "solve")
    with pytest.raises(ValueError, match="unknown task 'solv'"):
        tb.build_token_batch([[1]], [[2]], [1.0], None, "solv")
    with pytest.raises(ValueError, match="exceeds the largest length bucket"):
        tb.build_token_batch([[1] * 5], [[2] * 5], [1.0], None, "solve", buckets=(4, 8))
    with pytest.raises(ValueError, match=r"old_logprobs\[0\] has shape"):
        tb.build_token_batch([[1]], [[2, 3]], [1.0], [[0.0]], "solve")
    b = tb.build_token_batch([[1]], [[2]], [1.0], None, "solve", length=4)
    with pytest.raises(ValueError, match="first token of a segment"):
        tb.validate_token_batch(b._replace(loss_mask=np.array([[1, 0, 0, 0]], np.float32)))
    with pytest.raises(ValueError, match="loss_mask has dtype"):
        tb.validate_token_batch(b._replace(loss_mask=b.loss_mask.astype(np.float64)))


def test_concat_pad_split_stack():
    a = tb.build_token_batch([[1, 2]], [[3]], [1.0], None, "solve", length=4)
    c = tb.build_token_batch([[1], [2]], [[3, 4, 5, 6, 7], [8]], [1.0, -1.0], None, "verify", length=8)
    both = tb.concat_batches([a, c])
    assert both.tokens.shape == (3, 8)
    np.testing.assert_array_equal(both.loss_mask[0], [0, 0, 1, 0, 0, 0, 0, 0])
    padded = tb.pad_rows_to(both, 4)
    assert padded.batch_size == 4 and padded.task_id[-1] == tb.PAD_TASK_ID
    assert padded.loss_mask[-1].sum() == 0 and padded.segment_ids[-1].sum() == 0
    parts = tb.split_micro_batches(padded, 2)
    assert [p.batch_size for p in parts] == [2, 2]
    np.testing.assert_array_equal(tb.concat_batches(parts).tokens, padded.tokens)
    stacked = tb.stack_micro_batches(padded, 2)
    assert stacked.tokens.shape == (2, 2, 8) and stacked.task_id.shape == (2, 2)
    with pytest.raises(ValueError, match=r"pad_rows_to\(batch, 2\)"):
        tb.split_micro_batches(both, 2)
    with_ref = a._replace(ref_logprobs=np.zeros_like(a.old_logprobs))
    with pytest.raises(ValueError, match="ref_logprobs present in batches"):
        tb.concat_batches([with_ref, c])
    # jax leaves go through the same helpers.
    jb = jax.tree.map(jnp.asarray, both)
    assert tb.pad_rows_to(jb, 4).tokens.shape == (4, 8)


def test_register_task_extends_registry():
    tid = tb.register_task("summarize_test_only")
    try:
        assert tb.task_id("summarize_test_only") == tid == max(tb.TASKS.values())
        assert tb.task_name(tid) == "summarize_test_only"
        assert tb.register_task("summarize_test_only") == tid
    finally:
        del tb.TASKS["summarize_test_only"]


# ----------------------------------------------------------------------------------------------------------------
# Log-probs and entropy


def test_token_logprobs_hand_values_and_dtype():
    logits = jnp.array([[[0.0, np.log(3.0)], [np.log(4.0), 0.0]]], jnp.bfloat16)
    lp = S.token_logprobs(logits, jnp.array([[1, 1]]))
    assert lp.dtype == jnp.float32
    # bf16 log(3), log(4) are rounded; compare with the float32 computation on the same (rounded) values.
    x = np.asarray(logits.astype(jnp.float32))
    want = x[0, [0, 1], [1, 1]] - np.log(np.exp(x[0]).sum(-1))
    np.testing.assert_allclose(lp[0], want, rtol=1e-6)
    np.testing.assert_allclose(lp[0], [np.log(0.75), np.log(0.2)], atol=3e-3)
    ent = S.token_entropy(jnp.zeros((2, 3, 7)))
    np.testing.assert_allclose(ent, np.full((2, 3), np.log(7.0)), rtol=1e-6)


def test_next_token_logprobs_shift():
    logits = _normal(0, (2, 5, V))
    tokens = _ints(1, (2, 5))
    lp = S.next_token_logprobs(logits, tokens)
    full = jax.nn.log_softmax(logits, axis=-1)
    np.testing.assert_array_equal(lp[:, 0], 0.0)
    for t in range(1, 5):
        np.testing.assert_allclose(lp[:, t], full[jnp.arange(2), t - 1, tokens[:, t]], rtol=1e-6)


def test_chunked_logprobs_match_values_and_grads():
    logits = _normal(2, (2, 7, V))
    tgt = _ints(3, (2, 7))
    w = _normal(4, (2, 7))

    @jax.jit
    def run(lg):
        outs = []
        for c in (3, None):  # T = 7: two scanned chunks of 3 plus a tail of 1, against no chunking
            f = lambda x: jnp.sum(w * S.token_logprobs(x, tgt, chunk_size=c))
            outs.append((S.token_logprobs(lg, tgt, chunk_size=c), jax.grad(f)(lg), S.token_entropy(lg, chunk_size=c)))
        return outs

    chunked, plain = run(logits)
    for got, want in zip(chunked, plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_logprobs_from_hidden_match_logits_path():
    h = _normal(5, (2, 6, 4))
    w = _normal(6, (4, V))
    tgt = _ints(7, (2, 6))

    @jax.jit
    def run(h):
        lp, ent = S.token_logprobs_from_hidden(h, w, tgt, chunk_size=4, with_entropy=True)
        g = jax.grad(lambda x: S.token_logprobs_from_hidden(x, w, tgt, chunk_size=4).sum())(h)
        return lp, ent, g

    @jax.jit
    def reference(h):
        g = jax.grad(lambda x: S.token_logprobs(x @ w, tgt).sum())(h)
        return S.token_logprobs(h @ w, tgt), S.token_entropy(h @ w), g

    for got, want in zip(run(h), reference(h)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="transpose"):
        S.token_logprobs_from_hidden(h, w.T, tgt)


# ----------------------------------------------------------------------------------------------------------------
# Aggregations


def _agg_case():
    # Row 0 packs two sequences (segments 1 and 2); row 1 holds one. 9s sit on untrained slots.
    loss = jnp.array([[9, 1, 3, 9, 5, 7], [9, 9, 10, 9, 9, 9]], jnp.float32)
    mask = jnp.array([[0, 1, 1, 0, 1, 1], [0, 0, 1, 0, 0, 0]], jnp.float32)
    seg = jnp.array([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 0, 0]], jnp.int32)
    return loss, mask, seg


@pytest.mark.parametrize("agg,num,den", [
    ("token_mean", 1 + 3 + 5 + 7 + 10, 5),                       # all trained tokens
    ("seq_mean_token_mean", (1 + 3) / 2 + (5 + 7) / 2 + 10, 3),   # per-sequence means (2, 6, 10) over 3 sequences
    ("seq_mean_token_sum_norm", (1 + 3 + 5 + 7 + 10) / 4, 3),      # token sums / max_len 4, over 3 sequences
])
def test_aggregations_hand_values(agg, num, den):
    loss, mask, seg = _agg_case()
    term = L.aggregate(loss, mask, seg, agg, max_len=4)
    np.testing.assert_allclose(term.num, num, rtol=1e-6)
    np.testing.assert_allclose(term.den, den)
    np.testing.assert_allclose(term.value, num / den, rtol=1e-6)


def test_batch_counts_per_task():
    _, mask, seg = _agg_case()
    z = jnp.zeros_like(mask)
    b = tb.TokenBatch(tokens=seg, positions=seg, segment_ids=seg, loss_mask=mask, advantages=z, old_logprobs=z,
                      ref_logprobs=None, task_id=jnp.array([tb.TASKS["solve"], tb.TASKS["verify"]], jnp.int32))
    c = L.batch_counts(b)
    assert c.tokens.shape == (len(tb.TASKS),)
    np.testing.assert_allclose(c.tokens[tb.TASKS["solve"]], 4)
    np.testing.assert_allclose(c.sequences[tb.TASKS["solve"]], 2)
    np.testing.assert_allclose(c.tokens[tb.TASKS["verify"]], 1)
    np.testing.assert_allclose(c.sequences[tb.TASKS["verify"]], 1)
    np.testing.assert_allclose(c.tokens.sum(), 5)
    assert L.counts_metrics(c)["solve/sequences"] == 2


def test_unknown_aggregation_and_missing_max_len():
    loss, mask, seg = _agg_case()
    with pytest.raises(ValueError, match="unknown aggregation 'mean'"):
        L.aggregate(loss, mask, seg, "mean")
    with pytest.raises(ValueError, match="needs max_len"):
        L.pg_spec(aggregation="seq_mean_token_sum_norm")


# ----------------------------------------------------------------------------------------------------------------
# PPO clip, KL, SFT kernels


def _ppo_grad(ratio, a, **kw):
    """d loss / d logp at old_logp = 0, logp = log(ratio), for one token with advantage a."""
    f = lambda lp: L.ppo_clip_per_token(lp, jnp.zeros(1), jnp.array([a]), jnp.ones(1), **kw)[0].sum()
    lp = jnp.log(jnp.array([ratio], jnp.float32))
    return float(jax.grad(f)(lp)[0]), float(f(lp))


def test_ppo_clip_gradients_vanish_outside_range_in_clipped_direction():
    kw = dict(eps_low=0.2, eps_high=0.28)
    # Inside the range: loss -A r, gradient -A r.
    g, l = _ppo_grad(1.1, 2.0, **kw)
    np.testing.assert_allclose([g, l], [-2.0 * 1.1, -2.0 * 1.1], rtol=1e-6)
    # A > 0 and r above 1 + eps_high: clipped, no gradient.
    g, l = _ppo_grad(1.5, 2.0, **kw)
    assert g == 0.0 and np.isclose(l, -2.0 * 1.28)
    # Clip-higher: r = 1.25 is inside [0.8, 1.28] but would be clipped with a symmetric 0.2.
    assert _ppo_grad(1.25, 1.0, **kw)[0] != 0.0
    assert _ppo_grad(1.25, 1.0, eps_low=0.2, eps_high=0.2)[0] == 0.0
    # A > 0 and r below 1 - eps_low: the pessimistic bound is the unclipped one, the gradient stays.
    np.testing.assert_allclose(_ppo_grad(0.5, 2.0, **kw)[0], -2.0 * 0.5, rtol=1e-6)
    # A < 0 and r below 1 - eps_low: clipped, no gradient.
    g, l = _ppo_grad(0.5, -1.0, **kw)
    assert g == 0.0 and np.isclose(l, 0.8)
    # A < 0 and r above 1 + eps_high: unclipped, gradient -A r.
    np.testing.assert_allclose(_ppo_grad(2.0, -1.0, **kw)[0], 2.0, rtol=1e-6)


def test_dual_clip_caps_negative_advantage_loss():
    kw = dict(eps_low=0.2, eps_high=0.2, dual_clip=3.0)
    g, l = _ppo_grad(20.0, -1.5, **kw)
    assert g == 0.0 and np.isclose(l, 1.5 * 3.0)          # capped at -A c
    assert np.isclose(_ppo_grad(20.0, -1.5, eps_low=0.2, eps_high=0.2)[1], 1.5 * 20.0, rtol=1e-5)  # without cap
    g, l = _ppo_grad(2.0, -1.5, **kw)                      # below c: ordinary PPO
    assert np.isclose(g, 3.0) and np.isclose(l, 3.0)
    # Positive advantages are never dual-clipped.
    assert _ppo_grad(20.0, 1.5, **kw)[1] == _ppo_grad(20.0, 1.5, eps_low=0.2, eps_high=0.2)[1]
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        _ppo_grad(1.0, -1.0, dual_clip=0.5)


def test_ppo_stats_hand_counts():
    ratio = jnp.array([[0.5, 1.5, 1.0, 0.5, 1.5, 30.0, 9.0]])
    a = jnp.array([[-1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 3.0]])
    mask = jnp.array([[1, 1, 1, 1, 1, 1, 0]], jnp.float32)  # the last token is not trained
    _, s = L.ppo_clip_per_token(jnp.log(ratio), jnp.zeros_like(ratio), a, mask, dual_clip=10.0)
    m = lambda k: float(jnp.sum(s[k] * mask))
    assert m("clip_frac_low") == 1 and m("clip_frac_high") == 1 and m("dual_clip_frac") == 1
    np.testing.assert_allclose(m("ratio_mean"), 0.5 + 1.5 + 1.0 + 0.5 + 1.5 + 30.0, rtol=1e-6)


def test_kl_estimators_hand_values():
    lp, ref, mask = jnp.log(jnp.array([0.5])), jnp.log(jnp.array([0.25])), jnp.ones(1)
    d = np.log(0.5)  # log(ref / pi)
    for est, want in [("k1", -d), ("k2", 0.5 * d**2), ("k3", np.exp(d) - 1 - d)]:
        np.testing.assert_allclose(L.kl_per_token(lp, ref, mask, estimator=est)[0], [want], rtol=1e-6)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        L.kl_spec(beta=0.1, estimator="k4")


def test_term_functions_return_num_den():
    b = tb.build_token_batch([[1, 2], [3]], [[4, 5], [6]], [1.0, -1.0], [[-1.0, -1.0], [-2.0]], "solve", length=4)
    lp = jnp.asarray(b.old_logprobs)  # ratio 1 everywhere: loss = -A per token
    term, metrics = L.ppo_clip_term(lp, b, aggregation="token_mean")
    np.testing.assert_allclose([term.num, term.den], [-1 - 1 + 1, 3])
    term, _ = L.ppo_clip_term(lp, b, aggregation="seq_mean_token_mean")
    np.testing.assert_allclose([term.num, term.den], [-1 + 1, 2])
    term, metrics = L.sft_term(lp, b)
    np.testing.assert_allclose([term.num, term.den], [1 + 1 + 2, 3])
    np.testing.assert_allclose(metrics["nll"], 4 / 3, rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# One optimiser step on a stand-in model moves log-probs the right way


@pytest.fixture(scope="module")
def table_params():
    return table_init(0)


def test_pg_update_follows_advantage_sign(table_params):
    b = tb.build_token_batch([[1, 2], [3, 4]], [[5, 6, 7], [8, 9]], [1.0, -1.0], None, "solve", length=8)
    b = on_policy(table_logits, table_params, b)
    before = seq_logprob(table_logits, table_params, b)
    new = one_step(table_logits, table_params, b, (L.pg_spec(aggregation="seq_mean_token_mean"),), lr=0.5)
    after = seq_logprob(table_logits, new, b)
    assert after[0] > before[0] + 1e-3  # positive advantage: more likely
    assert after[1] < before[1] - 1e-3  # negative advantage: less likely


def test_kl_term_pulls_toward_reference(table_params):
    b = tb.build_token_batch([[1], [2]], [[3, 4], [5, 6]], [0.0, 0.0], None, "solve", length=4)
    b = on_policy(table_logits, table_params, b)
    lp0 = np.asarray(model_logprobs(table_logits, table_params, b))
    mask = b.loss_mask > 0
    shift = np.where(mask, np.array([[0, 0.7, -0.5, 0], [0, -0.6, 0.4, 0]]), 0.0)
    b = b._replace(ref_logprobs=((lp0 + shift) * mask).astype(np.float32))
    for estimator in ("k2", "k3"):
        terms = (L.pg_spec(), L.kl_spec(beta=0.5, estimator=estimator))
        new = one_step(table_logits, table_params, b, terms, lr=0.5)
        lp1 = np.asarray(model_logprobs(table_logits, new, b))
        gap0 = np.abs(lp0 - b.ref_logprobs)[mask]
        gap1 = np.abs(lp1 - b.ref_logprobs)[mask]
        assert np.all(gap1 < gap0 - 1e-4), (estimator, gap0, gap1)
        assert np.all(np.sign(lp1 - lp0)[mask] == np.sign(shift[mask])), estimator


def test_sft_term_raises_target_probability(table_params):
    yes = 7
    b = tb.build_token_batch([[1, 2, 3]], [[yes]], [0.0], None, "verify", length=4)
    p0 = np.exp(seq_logprob(table_logits, table_params, b))
    new = one_step(table_logits, table_params, b, (L.sft_spec(("verify",)),), lr=0.05, opt=optax.adam)
    assert np.exp(seq_logprob(table_logits, new, b))[0] > p0[0] + 1e-3


# ----------------------------------------------------------------------------------------------------------------
# Objective: tasks, metrics, reference skipping, finiteness


def _mixed_batch(params, logits_fn, key=0):
    """Rows of unequal lengths across three tasks, one row packing two sequences, off-policy old/ref log-probs."""
    rng = np.random.default_rng(key)
    rows = []
    specs = [("solve", 3, 5), ("solve", 2, 1), ("verify", 6, 1), ("guided_solve", 2, 7),
             ("solve", 4, 3), ("verify", 3, 1), ("guided_solve", 1, 2), ("solve", 2, 9)]
    for task, p, c in specs:
        rows.append(([int(x) for x in rng.integers(1, V, p)], [int(x) for x in rng.integers(1, V, c)], task))
    adv = [float(rng.normal()) for _ in rows]
    b = tb.build_token_batch([r[0] for r in rows], [r[1] for r in rows], adv, None, [r[2] for r in rows],
                             length=16)
    # Pack a second sequence into row 1 (it has room): segment 2, positions restarting at 0, its own mask.
    b.tokens[1, 5:10] = [3, 4, 5, 6, 7]
    b.segment_ids[1, 5:10] = 2
    b.positions[1, 5:10] = np.arange(5)
    b.loss_mask[1, 7:10] = 1.0
    b.advantages[1, 7:10] = -0.8
    tb.validate_token_batch(b)
    lp = np.asarray(model_logprobs(logits_fn, params, b))
    noise = rng.normal(scale=0.3, size=lp.shape).astype(np.float32)
    m = b.loss_mask
    return b._replace(old_logprobs=((lp + noise) * m).astype(np.float32),
                      ref_logprobs=((lp - noise) * m).astype(np.float32))


@pytest.fixture(scope="module")
def mlp_setup():
    params = mlp_init(1)
    return params, _mixed_batch(params, mlp_logits)


def _terms(agg):
    return (
        L.pg_spec(("solve", "guided_solve"), aggregation=agg, max_len=16, eps_low=0.2, eps_high=0.28, dual_clip=3.0),
        L.kl_spec(("solve", "guided_solve"), beta=0.1, aggregation=agg, max_len=16),
        L.sft_spec(("verify",), weight=0.5, aggregation=agg, max_len=16),
    )


def _grad_and_metrics(params, batch, terms, counts):
    def f(p):
        return L.objective(model_logprobs(mlp_logits, p, batch), batch, terms, counts=counts)

    (loss, metrics), g = jax.value_and_grad(f, has_aux=True)(params)
    return loss, g, metrics


@functools.partial(jax.jit, static_argnums=(2, 3))
def _full_and_accumulated(params, batch, terms, n_micro):
    """The full-batch step and the same step accumulated with lax.scan over micro-batches (one compile)."""
    full = _grad_and_metrics(params, batch, terms, None)
    counts = L.batch_counts(batch)  # once, from the full batch

    def step(acc, mb):
        out = _grad_and_metrics(params, mb, terms, counts)
        # What per-micro-batch normalisation (the usual bug) would give instead; forward only.
        local = L.objective(model_logprobs(mlp_logits, params, mb), mb, terms, counts=L.batch_counts(mb))[0]
        return jax.tree.map(jnp.add, acc, (out, local)), None

    zero = jax.tree.map(jnp.zeros_like, (full, full[0]))
    acc, local = jax.lax.scan(step, zero, tb.stack_micro_batches(batch, n_micro))[0]
    return full, acc, local


@pytest.mark.parametrize("agg", L.AGGREGATIONS)
def test_micro_batch_accumulation_equals_full_batch(mlp_setup, agg):
    params, batch = mlp_setup
    (full_loss, full_g, full_m), (acc_loss, acc_g, acc_m), local_loss = _full_and_accumulated(
        params, batch, _terms(agg), 4)
    np.testing.assert_allclose(acc_loss, full_loss, rtol=1e-5, atol=1e-6)
    for k in full_g:
        np.testing.assert_allclose(acc_g[k], full_g[k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert set(acc_m) == set(full_m)
    for k in full_m:  # metrics are additive too
        np.testing.assert_allclose(acc_m[k], full_m[k], rtol=1e-4, atol=1e-6, err_msg=k)
    # Normalising each micro-batch by its own counts would not match: the test can tell the two apart.
    assert not np.isclose(float(local_loss), float(full_loss), rtol=1e-3)


def test_objective_per_task_metrics_and_restriction(mlp_setup):
    params, batch = mlp_setup
    terms = _terms("token_mean")
    lp = model_logprobs(mlp_logits, params, batch)
    ent = S.align_to_targets(S.token_entropy(mlp_logits(params, jnp.asarray(batch.tokens))))
    loss, m = objective(lp, batch, terms, entropy=ent)
    for key in ["loss/total", "loss/pg", "loss/kl", "loss/sft", "solve/clip_frac_low", "solve/clip_frac_high",
                "solve/dual_clip_frac", "solve/approx_kl", "solve/ratio_mean", "guided_solve/clip_frac_high",
                "solve/kl_ref", "verify/nll", "verify/target_prob", "solve/entropy", "verify/entropy"]:
        assert key in m, key
    assert "verify/clip_frac_low" not in m and "solve/nll" not in m
    np.testing.assert_allclose(loss, m["loss/pg"] + 0.1 * m["loss/kl"] + 0.5 * m["loss/sft"], rtol=1e-6)
    # verify/nll is the token-mean NLL over verify rows, computed independently here.
    vrows = np.asarray(batch.task_id) == tb.TASKS["verify"]
    vm = batch.loss_mask * vrows[:, None]
    np.testing.assert_allclose(m["verify/nll"], -(np.asarray(lp) * vm).sum() / vm.sum(), rtol=1e-5)
    # The PG term touches only its tasks' rows: its gradient w.r.t. verify-row log-probs is zero.
    g = jax.jit(jax.grad(lambda x: L.objective(x, batch, terms[:1])[0]))(lp)
    assert np.all(np.asarray(g)[vrows] == 0.0)
    assert np.any(np.asarray(g)[~vrows] != 0.0)


def test_beta_zero_needs_no_reference(mlp_setup):
    params, batch = mlp_setup
    no_ref = batch._replace(ref_logprobs=None)
    lp = model_logprobs(mlp_logits, params, no_ref)
    terms0 = (L.pg_spec(), L.kl_spec(beta=0.0))
    assert not L.needs_reference(terms0) and L.needs_reference(_terms("token_mean"))
    loss0, m0 = objective(lp, no_ref, terms0)
    assert "loss/kl" not in m0 and np.isfinite(loss0)
    with pytest.raises(ValueError, match="needs TokenBatch.ref_logprobs"):
        L.objective(lp, no_ref, (L.pg_spec(), L.kl_spec(beta=0.1)))
    with pytest.raises(ValueError, match="repeated"):
        L.objective(lp, no_ref, (L.pg_spec(), L.pg_spec()))


def test_finite_flags_name_the_bad_term(mlp_setup):
    params, batch = mlp_setup
    lp = np.asarray(model_logprobs(mlp_logits, params, batch)).copy()
    r, t = np.argwhere((np.asarray(batch.task_id)[:, None] == tb.TASKS["verify"]) & (batch.loss_mask > 0))[0]
    lp[r, t] = np.nan
    _, m = objective(jnp.asarray(lp), batch, _terms("token_mean"))
    flags = jax.jit(L.finite_flags)(m)
    assert L.nonfinite_terms(flags) == ["sft", "total"]
    _, m = objective(model_logprobs(mlp_logits, params, batch), batch, _terms("token_mean"))
    assert L.nonfinite_terms(L.finite_flags(m)) == []
    assert bool(L.tree_is_finite(params)) and not bool(L.tree_is_finite({"a": jnp.array([1.0, jnp.inf])}))


def test_row_bucket_bounds_filler_and_shapes():
    from jaxrl_reason.buckets import row_bucket
    from jaxrl_reason.rl.batch import pad_rows_to

    for multiple in (1, 2, 8):
        sizes = set()
        for n in range(1, 300):
            b = row_bucket(n, multiple)
            assert b >= n and b % multiple == 0 and (b - n) < max(multiple, 0.25 * b)
            sizes.add(b)
        assert len(sizes) <= 45  # a few shapes, not one per row count
    # RL^V-like steps: 64 solve rows plus 16..46 verify rows compile at most three update shapes
    assert {row_bucket(64 + v) for v in range(16, 47, 2)} == {80, 96, 112}
    assert row_bucket(64) == 64
    batch = tb.build_token_batch([[1, 2]] * 9, [[3]] * 9, [0.0] * 9, None, "solve")
    padded = pad_rows_to(batch, 1, bucket=True)
    assert padded.batch_size == 10 and (padded.task_id[9:] == -1).all() and padded.loss_mask[9:].sum() == 0
