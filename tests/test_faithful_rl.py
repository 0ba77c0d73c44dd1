"""The RL objective as the references define it (docs/methods/grpo.md#spec): the tempered policy is the one
optimised, the KL sits in the policy term's aggregation, truncated importance sampling corrects top-p, PPO epochs
split into mini-batches with a schedule over optimizer steps, and DAPO's overlong shaping and filtering.

Each test below fails on the code before these conventions (commit f10646a): sampler and update scored at
temperature 1, KL always token-mean, no TIS / mini-batches / overlong knobs, total_steps = RL steps."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rl.batch import build_token_batch, concat_batches, split_mini_batches
from jaxrl_reason.rl.importance import truncated_is_weights
from jaxrl_reason.rl.losses import objective, pg_spec, scoring_temperatures, sft_spec
from jaxrl_reason.rl.overlong import overlong_penalty
from jaxrl_reason.sampling.logits import sample_step
from jaxrl_reason.sampling.sampler import sample
from jaxrl_reason.train.trainer import Trainer, TrainerConfig, optimizer_steps
from jaxrl_reason.rl.scoring import model_logprobs
from jaxrl_reason.train.update import make_update

from tiny import ARITH, arith_tokenizer, tiny_model  # noqa: E402

T = 0.7


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return arith_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def sampled(tokenizer):
    """A tiny model and rows it sampled at T = 0.7, with the sampler's own log-probs as pi_old."""
    model = tiny_model(tokenizer, seed=2)
    prompts = [tokenizer.encode(tokenizer.render_prompt(e.question)) for e in arithmetic_examples(3, seed=5,
                                                                                                    config=ARITH)]
    out = sample(model, prompts, jax.random.PRNGKey(4), max_new_tokens=10, temperature=T, num_samples=2,
                 pad_id=tokenizer.pad_id)
    comps = out.completions()
    adv = [1.0, -0.5, 0.25, -1.0, 0.75, -0.25]
    batch = build_token_batch([prompts[i] for i in out.prompt_index], comps, adv,
                              [out.logprobs[i, :n] for i, n in enumerate(out.lengths)], "solve",
                              pad_id=tokenizer.pad_id)
    return model, batch


# ------------------------------------------------------------------------------------------------ temperature


@pytest.mark.slow  # 30 s a call on 2 shared cores (2026-12-07)
def test_first_epoch_ratio_is_one_under_the_sampling_temperature(sampled):
    model, batch = sampled
    graphdef, params = nnx.split(model)
    terms = (pg_spec(("solve",), aggregation="token_mean"),)
    tempered = make_update(graphdef, optax.sgd(0.0), terms, temperature=T)
    out = tempered(jax.tree.map(jnp.copy, params), optax.sgd(0.0).init(params), batch)
    assert float(out.metrics["logprob_gap/max"]) < 2e-5
    np.testing.assert_allclose(float(out.metrics["solve/ratio_mean"]), 1.0, atol=1e-5)
    # scored at T = 1 (the old convention) the same rows are far off-policy
    plain = make_update(graphdef, optax.sgd(0.0), terms, temperature=1.0)
    out1 = plain(jax.tree.map(jnp.copy, params), optax.sgd(0.0).init(params), batch)
    assert float(out1.metrics["logprob_gap/mean"]) > 1e-2


@pytest.mark.slow  # 32 s a call on 2 shared cores (2026-12-07)
def test_update_gradient_is_the_reinforce_gradient_of_the_tempered_policy(sampled):
    model, batch = sampled
    graphdef, params = nnx.split(model)
    terms = (pg_spec(("solve",), aggregation="token_mean"),)
    update = make_update(graphdef, optax.sgd(1.0), terms, temperature=T)
    new = update(jax.tree.map(jnp.copy, params), optax.sgd(1.0).init(params), batch).params
    tokens, mask, adv = (jnp.asarray(x) for x in (batch.tokens, batch.loss_mask, batch.advantages))

    def reinforce(p):  # -(1/N) sum_t A_t log pi_T(y_t), written from the model's logits
        m = nnx.merge(graphdef, p)
        logits = m(tokens, jnp.asarray(batch.positions), jnp.asarray(batch.segment_ids))
        lp = jax.nn.log_softmax(logits.astype(jnp.float32) / T, axis=-1)
        lp = jnp.take_along_axis(lp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
        return -jnp.sum(adv[:, 1:] * lp * mask[:, 1:]) / jnp.sum(mask)

    grads = jax.grad(reinforce)(params)
    moved = 0.0
    for n, p, g in zip(jax.tree.leaves(new), jax.tree.leaves(params), jax.tree.leaves(grads)):
        np.testing.assert_allclose(np.asarray(p) - np.asarray(n), np.asarray(g), atol=2e-6, rtol=1e-4)
        moved = max(moved, float(np.abs(g).max()))
    assert moved > 1e-4
    # and it is not the T = 1 gradient
    g1 = jax.grad(lambda p: reinforce_at(graphdef, p, batch, 1.0))(params)
    assert max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
               for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(grads))) > 1e-4


def reinforce_at(graphdef, p, batch, temp):
    m = nnx.merge(graphdef, p)
    tokens = jnp.asarray(batch.tokens)
    logits = m(tokens, jnp.asarray(batch.positions), jnp.asarray(batch.segment_ids))
    lp = jax.nn.log_softmax(logits.astype(jnp.float32) / temp, axis=-1)
    lp = jnp.take_along_axis(lp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    mask = jnp.asarray(batch.loss_mask)[:, 1:]
    return -jnp.sum(jnp.asarray(batch.advantages)[:, 1:] * lp * mask) / jnp.sum(mask)


def test_supervised_rows_score_at_temperature_one(sampled):
    model, batch = sampled
    graphdef, params = nnx.split(model)
    verify = build_token_batch([[5, 6, 7]], [[9]], [0.0], None, "verify", length=batch.length)
    mixed = concat_batches([batch, verify])
    temps = scoring_temperatures((pg_spec(("solve",)), sft_spec(("verify",))), T)
    lp_mixed = np.asarray(model_logprobs(graphdef, params, mixed, temperature=temps)[0])
    lp_t1 = np.asarray(model_logprobs(graphdef, params, mixed, temperature=1.0)[0])
    lp_t = np.asarray(model_logprobs(graphdef, params, mixed, temperature=T)[0])
    n = batch.batch_size
    np.testing.assert_allclose(lp_mixed[n:], lp_t1[n:], atol=1e-6)  # the verdict: T = 1
    np.testing.assert_allclose(lp_mixed[:n], lp_t[:n], atol=1e-6)  # the samples: T
    with pytest.raises(ValueError, match="both a supervised and a sampled"):
        scoring_temperatures((pg_spec(("solve",)), sft_spec(("solve",))), T)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        TrainerConfig(temperature=0.0)


# ------------------------------------------------------------------------------------------------ KL aggregation


def test_kl_is_aggregated_as_the_policy_term():
    loss = PolicyLossConfig(aggregation="seq_mean_token_mean", beta=0.5)
    pg, kl = loss.terms()
    assert kl.aggregation == pg.aggregation == "seq_mean_token_mean"
    assert PolicyLossConfig(aggregation="seq_mean_token_sum_norm", max_len=8, beta=0.1).terms()[1].max_len == 8
    # hand-computed: two sequences of 1 and 3 tokens, log pi = 0, log pi_ref = d; k3 = exp(d) - 1 - d
    b = build_token_batch([[1, 2], [1, 2]], [[3], [4, 5, 6]], [0.0, 0.0], [[0.0], [0.0] * 3], "solve",
                          ref_logprobs=[[0.5], [-1.0, 0.0, 1.0]], length=8)
    k3 = lambda d: np.exp(d) - 1 - d
    per_seq = [k3(0.5), np.mean([k3(-1.0), k3(0.0), k3(1.0)])]
    _, m = objective(jnp.zeros(b.tokens.shape), b, (kl,))
    np.testing.assert_allclose(float(m["loss/kl"]), np.mean(per_seq), rtol=1e-6)
    token_mean = np.mean([k3(0.5), k3(-1.0), k3(0.0), k3(1.0)])
    assert abs(np.mean(per_seq) - token_mean) > 0.05  # the old (token-mean) value differs


# ------------------------------------------------------------------------------------------------ TIS


def test_truncated_is_removes_the_top_p_bias_monte_carlo():
    # One step of a categorical policy; the reward is 1 on the most likely token (inside every nucleus).
    logits = jax.random.normal(jax.random.PRNGKey(3), (10,)) * 1.5
    draws = 60_000
    s = sample_step(jnp.broadcast_to(logits, (draws, 10)), jax.random.PRNGKey(9), T, 0.8, 0)
    tok, old, q = np.asarray(s.token), np.asarray(s.logprob), np.asarray(s.sampling_logprob)
    pi_t = np.asarray(jax.nn.softmax(logits / T))
    f = (tok == int(np.argmax(pi_t))).astype(np.float64)
    truth = pi_t.max()  # E_{pi_T}[f]
    se = np.sqrt(truth * (1 - truth) / draws)
    uncorrected = f.mean()
    w, metrics = truncated_is_weights([old], [q], mode="token", cap=10.0)
    corrected = float((w[0] * f).mean())
    assert abs(uncorrected - truth) > 8 * se  # the nucleus renormalisation inflates it
    assert abs(corrected - truth) < 4 * se
    assert metrics["tis/log_ratio_mean"] < 0 and metrics["tis/capped_frac"] == 0.0


def test_tis_weights_by_token_and_by_sequence_with_cap():
    old, q = [np.log([0.2, 0.5, 0.9])], [np.log([0.1, 0.5, 0.3])]
    w_tok, m = truncated_is_weights(old, q, mode="token", cap=2.5)
    np.testing.assert_allclose(w_tok[0], [2.0, 1.0, 2.5], rtol=1e-6)
    assert m["tis/capped_frac"] == pytest.approx(1 / 3)
    w_seq, _ = truncated_is_weights(old, q, mode="sequence", cap=100.0)
    np.testing.assert_allclose(w_seq[0], [6.0] * 3, rtol=1e-5)
    w_off, _ = truncated_is_weights(old, q, mode="off", cap=2.0)
    np.testing.assert_array_equal(w_off[0], 1.0)
    with pytest.raises(ValueError, match="tis='tokens' is unknown"):
        PolicyLossConfig(tis="tokens")


def fake_rollouts(comps, rewards, finish=None, logprobs=None, sampling=None):
    q, g = np.asarray(rewards).shape
    lps = logprobs or [np.full(len(c), -1.0, np.float32) for c in comps]
    ex = arithmetic_examples(q, seed=1, config=ARITH)
    return Rollouts(ex, [[1, 2, 3]] * q, comps, lps, ["x"] * len(comps), np.asarray(rewards, np.float32),
                    finish or ["eos"] * len(comps), [{}] * len(comps), sampling)


def test_grpo_folds_tis_weights_into_token_advantages():
    comps = [[5, 6], [7, 8], [9, 10], [11, 12]]
    old = [np.log(np.array([0.5, 0.5], np.float32))] * 4
    q = [np.log(np.array([0.25, 0.5], np.float32))] * 4
    ro = fake_rollouts(comps, [[1.0, 0.0, 1.0, 0.0]], logprobs=old, sampling=q)
    ctx = Context(None, None, None, np.random.default_rng(0), 0)
    plain, _ = GRPO("grpo", PolicyLossConfig()).build(ro, ctx)
    corrected, m = GRPO("grpo", PolicyLossConfig(tis="token", tis_cap=1.5)).build(ro, ctx)
    a, ac = np.asarray(plain.advantages), np.asarray(corrected.advantages)
    trained = np.asarray(plain.loss_mask) != 0
    ratio = ac[trained] / a[trained]
    np.testing.assert_allclose(np.sort(np.unique(np.round(ratio, 5))), [1.0, 1.5])  # w = min(2, 1.5) and 1
    assert m["tis/capped_frac"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="sampling_logprobs"):
        GRPO("grpo", PolicyLossConfig(tis="token")).build(ro._replace(sampling_logprobs=None), ctx)


# ------------------------------------------------------------------------------------------------ DAPO overlong


def test_overlong_penalty_is_linear_over_the_buffer():
    np.testing.assert_allclose(overlong_penalty([10, 12, 14, 16], 16, 4, 1.0), [0.0, 0.0, -0.5, -1.0])
    np.testing.assert_allclose(overlong_penalty([15], 16, 4, 2.0), [-1.5])
    assert not overlong_penalty([16], 16, 0).any()
    with pytest.raises(ValueError, match="overlong_buffer=20"):
        overlong_penalty([3], 16, 20)


def test_grpo_overlong_shaping_and_filter():
    comps = [[5] * 4, [5] * 10, [5] * 16, [5] * 16]
    ro = fake_rollouts(comps, [[1.0, 1.0, 1.0, 0.0]], finish=["eos", "eos", "length", "length"])
    ctx = Context(None, None, None, np.random.default_rng(0), 0, max_new_tokens=16)
    plain, _ = GRPO("grpo", PolicyLossConfig()).build(ro, ctx)
    shaped, m = GRPO("grpo", PolicyLossConfig(overlong_buffer=8)).build(ro, ctx)
    first = lambda b: np.asarray(b.advantages)[np.arange(4), np.argmax(np.asarray(b.loss_mask) != 0, axis=1)]
    a0, a1 = first(plain), first(shaped)
    assert a0[0] == pytest.approx(a0[2])  # same reward, same advantage without shaping
    assert a1[2] < a1[1] < a1[0]  # the longer right answer now ranks lower
    assert m["overlong/penalised_frac"] == pytest.approx(0.75)
    filtered, mf = GRPO("grpo", PolicyLossConfig(overlong_filter=True)).build(ro, ctx)
    assert (np.asarray(filtered.loss_mask).sum(axis=1) == [4, 10, 0, 0]).all()
    assert mf["overlong/filtered_frac"] == 0.5
    with pytest.raises(ValueError, match="max_new_tokens"):
        GRPO("grpo", PolicyLossConfig(overlong_buffer=8)).build(ro, ctx._replace(max_new_tokens=0))


# ------------------------------------------------------------------------------------------------ mini-batches


def test_split_mini_batches_covers_every_row_once():
    b = build_token_batch([[1, 2]] * 7, [[3 + i] for i in range(7)], [float(i) for i in range(7)],
                          [[0.0]] * 7, "solve", length=8)
    parts = split_mini_batches(b, 3, rng=np.random.default_rng(0), multiple=2)
    assert len({p.batch_size for p in parts}) == 1 and parts[0].batch_size % 2 == 0
    seen = sorted(int(t) for p in parts for t, k in zip(np.asarray(p.tokens)[:, 2], np.asarray(p.task_id))
                  if k >= 0)
    assert seen == list(range(3, 10))
    with pytest.raises(ValueError, match="cannot fill 8 mini-batches"):
        split_mini_batches(b, 8)


def parity_reward(texts, examples):
    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])


def _count(opt_state):
    counts = [int(x) for p, x in jax.tree_util.tree_leaves_with_path(opt_state) if "count" in jax.tree_util.keystr(p)]
    return max(counts)


@pytest.mark.slow  # 53 s a call on 2 shared cores (2026-12-07)
def test_epochs_times_mini_batches_optimizer_steps_and_metrics(tokenizer, tmp_path):
    cfg = TrainerConfig(steps=2, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=8, lr=1e-3,
                        temperature=T, num_iterations=2, num_mini_batches=2, schedule="cosine",
                        checkpoint_every=0, progress=False, seed=3)
    assert optimizer_steps(cfg) == 8
    trainer = Trainer(tiny_model(tokenizer, seed=1), tokenizer, GRPO("grpo", PolicyLossConfig()),
                      arithmetic_examples(32, seed=2, config=ARITH), parity_reward, cfg, str(tmp_path))
    m = trainer.train_step()
    assert _count(trainer.state.opt_state) == 4  # 2 epochs x 2 mini-batches
    for e in (1, 2):
        assert f"epoch{e}/loss/pg" in m and f"epoch{e}/solve/ratio_mean" in m
    assert m["epoch1/solve/ratio_mean"] != m["epoch2/solve/ratio_mean"]  # later updates are off-policy
    np.testing.assert_allclose(m["loss/pg"], (m["epoch1/loss/pg"] + m["epoch2/loss/pg"]) / 2, rtol=1e-5)
    assert m["solve/sequences"] == 16  # counted once over the whole batch
    trainer.close()


def test_dynamic_sampling_is_refused_for_a_method_that_replays_into_zero_pass_groups(tokenizer, tmp_path):
    from jaxrl_reason.methods.cure import CURE

    assert CURE.uses_zero_signal_groups and not GRPO.uses_zero_signal_groups
    cfg = TrainerConfig(steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=4, dynamic_sampling=True,
                        progress=False)
    with pytest.raises(ValueError, match="dynamic_sampling"):
        Trainer(tiny_model(tokenizer), tokenizer, CURE(), arithmetic_examples(8, seed=2, config=ARITH),
                parity_reward, cfg, str(tmp_path))
