"""Shared prompts (rl.prefix): each group's prompt goes through the model once, and the update is the same."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_reason.models.qwen2 import ModelConfig, init_model
from jaxrl_reason.rl.batch import TASKS, build_token_batch, concat_batches, pad_rows_to, scored_size
from jaxrl_reason.rl.losses import kl_spec, pg_spec, sft_spec
from jaxrl_reason.rl.prefix import SharedPrefixBatch, share_prefixes
from jaxrl_reason.rl.scoring import model_logprobs
from jaxrl_reason.train.update import make_update

from tiny import assert_same_update  # noqa: E402

VOCAB = 64


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    return init_model(cfg, seed=1)


def grpo_batch(seed=0, groups=(5, 9, 3), group_size=4, with_ref=False, max_new=20):
    """Rows of GRPO groups: prompts of different lengths, completions of different lengths, random advantages."""
    rng = np.random.default_rng(seed)
    prompts, completions, adv, old, ref = [], [], [], [], []
    for n in groups:
        p = rng.integers(1, VOCAB, n).tolist()
        for _ in range(group_size):
            c = rng.integers(1, VOCAB, int(rng.integers(1, max_new))).tolist()
            prompts.append(p), completions.append(c), adv.append(float(rng.normal()))
            old.append((-3.0 + 0.1 * rng.normal(size=len(c))).tolist())
            ref.append((-3.0 + 0.1 * rng.normal(size=len(c))).tolist())
    return build_token_batch(prompts, completions, adv, old, "solve", ref_logprobs=ref if with_ref else None)


@pytest.mark.parametrize("scan_layers", [True, False])
def test_shared_prefix_hidden_states_equal_the_full_rows(model, scan_layers):
    m = init_model(model.config.replace(scan_layers=scan_layers), seed=1)
    rng = np.random.default_rng(0)
    plens, index, slens = [6, 4, 2], np.array([0, 0, 1, 2, 2]), [7, 5, 3, 7, 1]
    lp, ls = 6, 7
    pt = rng.integers(1, VOCAB, (3, lp))
    pv = np.arange(lp)[None] < np.array(plens)[:, None]
    st = rng.integers(1, VOCAB, (5, ls))
    sv = np.arange(ls)[None] < np.array(slens)[:, None]
    sp = np.array(plens)[index][:, None] + np.arange(ls)[None]
    hp, hs = m.shared_prefix_hidden_states(jnp.asarray(pt), jnp.asarray(np.where(pv, np.arange(lp), 0)),
                                           jnp.asarray(pv), jnp.asarray(index), jnp.asarray(st), jnp.asarray(sp),
                                           jnp.asarray(sv))
    for r in range(5):
        n = plens[index[r]]
        full = np.concatenate([pt[index[r], :n], st[r, :slens[r]]])[None]
        h, _ = m.hidden_states(jnp.asarray(full), jnp.arange(full.shape[1])[None])
        np.testing.assert_allclose(np.asarray(hp[index[r], :n]), np.asarray(h[0, :n]), atol=2e-6)
        np.testing.assert_allclose(np.asarray(hs[r, :slens[r]]), np.asarray(h[0, n:]), atol=2e-6)


def test_share_prefixes_layout():
    batch = pad_rows_to(grpo_batch(with_ref=True), 8)  # 12 rows + 4 filler rows
    sh = share_prefixes(batch)
    assert isinstance(sh, SharedPrefixBatch)
    assert sh.tokens_through_model() < batch.tokens.size
    np.testing.assert_array_equal(sh.prefix_index[:12], np.repeat([0, 1, 2], 4))
    assert sh.prefix_valid.sum(axis=1)[:3].tolist() == [5, 9, 3]
    for r in range(12):
        p = sh.prefix_tokens[sh.prefix_index[r], :sh.prefix_valid[sh.prefix_index[r]].sum()]
        n = int((batch.segment_ids[r] != 0).sum())
        np.testing.assert_array_equal(p, batch.tokens[r, :len(p)])
        # column 0 repeats the prompt's last token; the rest is the continuation, fields shifted with it
        np.testing.assert_array_equal(sh.rows.tokens[r, :n - len(p) + 1], batch.tokens[r, len(p) - 1:n])
        for f in ("positions", "loss_mask", "advantages", "old_logprobs", "ref_logprobs"):
            np.testing.assert_array_equal(getattr(sh.rows, f)[r, :n - len(p) + 1],
                                          getattr(batch, f)[r, len(p) - 1:n], err_msg=f)
        assert sh.rows.segment_ids[r, n - len(p) + 1:].sum() == 0
    assert sh.rows.loss_mask.sum() == batch.loss_mask.sum()
    assert sh.rows.segment_ids[12:].sum() == 0 and (sh.rows.task_id[12:] == -1).all()


def test_share_prefixes_splits_prefixes_by_micro_batch():
    batch = grpo_batch(groups=(5, 9, 3, 4), group_size=4)
    sh = share_prefixes(batch, micro_batches=2)
    assert sh.prefix_tokens.shape[0] % 2 == 0
    half = sh.prefix_tokens.shape[0] // 2
    np.testing.assert_array_equal(sh.prefix_index, np.repeat([0, 1, half, half + 1], 4))
    np.testing.assert_array_equal(sh.prefix_valid.sum(axis=1)[[0, 1, half, half + 1]], [5, 9, 3, 4])
    with pytest.raises(ValueError, match="micro_batches=3"):
        share_prefixes(batch, micro_batches=3)


def test_share_prefixes_declines_where_nothing_is_shared():
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, VOCAB, 20).tolist() for _ in range(8)]  # verify-like: one prompt per row
    batch = build_token_batch(prompts, [[7]] * 8, [0.0] * 8, None, "verify")
    assert share_prefixes(batch) is None
    packed = grpo_batch()
    seg = packed.segment_ids.copy()
    seg[0, 2:] = np.where(seg[0, 2:] > 0, 2, 0)  # a row holding two sequences
    assert share_prefixes(packed._replace(segment_ids=seg)) is None


@pytest.mark.slow  # 29-40 s a call on 2 shared cores (2026-12-07)
@pytest.mark.parametrize("micro_batches,head_at_trained_only", [(1, False), (1, True), (2, True)])
def test_update_on_shared_prefixes_is_the_same_update(model, micro_batches, head_at_trained_only):
    rng = np.random.default_rng(3)
    vp = [rng.integers(1, VOCAB, 11).tolist() for _ in range(2)]
    verify = build_token_batch(vp, [[7]] * 2, [0.0] * 2, None, "verify", ref_logprobs=[[0.0]] * 2)
    solve = grpo_batch(groups=(14, 18, 12), with_ref=True, max_new=10)
    # 12 solve rows + 2 verify rows; with 2 micro-batches a group straddles the blocks and is stored in both
    batch = concat_batches([solve, verify])
    shared = share_prefixes(batch, micro_batches)
    assert shared is not None and shared.tokens_through_model() < batch.tokens.size
    terms = (pg_spec(("solve",), aggregation="seq_mean_token_mean"), kl_spec(("solve",), beta=0.1),
             sft_spec(("verify",), weight=0.5))
    graphdef, params = nnx.split(model)
    opt = optax.sgd(1.0)  # the update is the gradient itself
    update = make_update(graphdef, opt, terms, micro_batches=micro_batches)
    plain = update(jax.tree.map(jnp.copy, params), opt.init(params),
                   batch, scored=scored_size(batch, micro_batches) if head_at_trained_only else None)
    out = update(jax.tree.map(jnp.copy, params), opt.init(params),
                 shared, scored=scored_size(shared.rows, micro_batches) if head_at_trained_only else None)
    assert_same_update(out, plain, params, ("loss/pg", "loss/kl", "loss/sft", "loss/total", "solve/entropy",
                                            "verify/nll", "grad_norm", "solve/tokens", "verify/sequences"),
                       rtol=2e-5, atol=2e-6)
    # the log-probs of every trained token, read back into the plain layout
    lp_plain = np.asarray(model_logprobs(graphdef, params, batch)[0])
    lp_shared = np.asarray(model_logprobs(graphdef, params, shared)[0])
    np.testing.assert_allclose(lp_shared[shared.rows.loss_mask != 0], lp_plain[batch.loss_mask != 0], atol=2e-6)
    assert TASKS["solve"] in shared.rows.task_id


@pytest.mark.slow  # 52 s a call on 2 shared cores (2026-12-07)
def test_trainer_step_is_the_same_with_and_without_shared_prompts(tmp_path):
    from test_trainer import make_trainer  # noqa: E402 - the trainer fixture of the RL-core tests
    from tiny import arith_tokenizer

    tok = arith_tokenizer(tmp_path / "tok")
    metrics, params = [], []
    for share in (True, False):
        tr = make_trainer(tok, str(tmp_path / f"s{share}"), steps=1, share_prompts=share)
        metrics.append(tr.train_step())
        params.append(tr.state.params)
        tr.close()
    assert metrics[0]["update/shared_prompts"] == 1 and metrics[1]["update/shared_prompts"] == 0
    assert metrics[0]["update/tokens"] < metrics[1]["update/tokens"]
    for k in ("loss/pg", "loss/kl", "grad_norm", "logprob_gap/mean"):
        np.testing.assert_allclose(metrics[0][k], metrics[1][k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert metrics[0]["logprob_gap/mean"] < 1e-5  # the sampler's log-probs are the shared forward's
    # AdamW's first step is ~lr * sign(g): entries with g ~ 0 magnify rounding, so the bound is a fraction of lr
    for a, b in zip(jax.tree.leaves(params[0]), jax.tree.leaves(params[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-4)

