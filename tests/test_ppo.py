"""PPO with a learned value (jaxrl_reason/methods/ppo.py): the value head, GAE advantages from it, the clipped
value loss in the fused update, checkpointing and the HF export of the head."""
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tiny import ARITH, arith_tokenizer, tiny_model

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.methods import make_method, method_knobs
from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.methods.ppo import PPO, ppo_advantages
from jaxrl_reason.models.hf_port import VALUE_HEAD_FILE, load_pretrained, save_pretrained
from jaxrl_reason.models.qwen2 import ModelConfig, attach_critic, attach_value_head, init_model
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rl.batch import pad_rows_to
from jaxrl_reason.train.trainer import Trainer, TrainerConfig
from jaxrl_reason.train.update import start_training

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True, rope_theta=10000.0)


def _logits(model, tokens):
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
    return np.asarray(model(tokens, pos))


def parity_reward(texts, examples):
    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])


# ---------------------------------------------------------------------------------------------- the head


def test_head_off_is_the_unchanged_model_and_the_head_draws_no_randomness():
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 9)), jnp.int32)
    off, on = init_model(CFG, seed=4), init_model(CFG.replace(value_head=True), seed=4)
    assert "value_head" not in nnx.to_pure_dict(nnx.state(off))
    # Every other parameter, hence the logits, is bitwise the same with the head on.
    pure_on = nnx.to_pure_dict(nnx.state(on))
    head = pure_on.pop("value_head")
    for a, b in zip(jax.tree.leaves(nnx.to_pure_dict(nnx.state(off))), jax.tree.leaves(pure_on)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(_logits(off, tokens), _logits(on, tokens))
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(head))  # zero-init: V = 0 at first
    before = _logits(off, tokens)
    attach_value_head(off)  # what the Trainer does for PPO: in place, logits untouched
    assert off.config.value_head and off.value_head is not None
    np.testing.assert_array_equal(_logits(off, tokens), before)
    h, _ = off.hidden_states(tokens, jnp.broadcast_to(jnp.arange(9), tokens.shape))
    assert off.values_from_hidden(h).shape == (2, 9)
    with pytest.raises(ValueError, match="no value head"):
        init_model(CFG).values_from_hidden(h)


def test_hf_export_drops_the_head_by_default_and_exports_it_on_request(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    model = init_model(CFG.replace(value_head=True), seed=1)
    nnx.update(model, {"value_head": {"kernel": nnx.Param(jnp.full((32, 1), 0.5)),
                                      "bias": nnx.Param(jnp.array([0.25]))}})
    plain = str(tmp_path / "plain")
    save_pretrained(model, plain)
    assert not os.path.exists(os.path.join(plain, VALUE_HEAD_FILE))
    hf = transformers.AutoModelForCausalLM.from_pretrained(plain)
    assert type(hf).__name__ == "Qwen2ForCausalLM"
    tokens = np.random.default_rng(1).integers(0, 64, (1, 7))
    with torch.no_grad():
        ref = hf(torch.as_tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(_logits(model, jnp.asarray(tokens, jnp.int32)), ref, atol=1e-4)
    assert load_pretrained(plain).value_head is None

    both = str(tmp_path / "both")
    save_pretrained(model, both, value_head="separate")
    assert os.path.exists(os.path.join(both, VALUE_HEAD_FILE))
    transformers.AutoModelForCausalLM.from_pretrained(both)  # the extra file does not disturb transformers
    back = load_pretrained(both, value_head=True)
    np.testing.assert_array_equal(np.asarray(back.value_head.kernel[...]), np.full((32, 1), 0.5, np.float32))
    np.testing.assert_array_equal(np.asarray(back.value_head.bias[...]), [0.25])
    assert load_pretrained(both).value_head is None  # without asking, the plain LM
    assert float(jnp.abs(load_pretrained(plain, value_head=True).value_head.kernel[...]).max()) == 0.0
    save_pretrained(model, both)  # dropping it again removes the stale export
    assert not os.path.exists(os.path.join(both, VALUE_HEAD_FILE))
    with pytest.raises(ValueError, match="no value head"):
        save_pretrained(init_model(CFG), both, value_head="separate")
    with pytest.raises(ValueError, match="value_head"):
        save_pretrained(model, both, value_head="keep")


# ---------------------------------------------------------------------------------------------- GAE from values


def test_sparse_reward_gae_by_hand():
    v = [np.array([0.5, 0.25, 0.75], np.float32), np.array([0.5], np.float32)]
    # gamma = lambda = 1: A_t = R - V(s_t), returns = R at every token.
    adv, ret, _ = ppo_advantages(v, [1.0, 0.0], gamma=1.0, lam=1.0, whitening="none")
    np.testing.assert_allclose(adv[0], [0.5, 0.75, 0.25], atol=1e-6)
    np.testing.assert_allclose(adv[1], [-0.5], atol=1e-6)
    np.testing.assert_allclose(ret[0], [1.0, 1.0, 1.0], atol=1e-6)
    # lambda = 0: one-step TD, A_t = V(s_{t+1}) - V(s_t), last token R - V.
    adv, ret, _ = ppo_advantages(v, [1.0, 0.0], gamma=1.0, lam=0.0, whitening="none")
    np.testing.assert_allclose(adv[0], [-0.25, 0.5, 0.25], atol=1e-6)
    np.testing.assert_allclose(ret[0], [0.25, 0.75, 1.0], atol=1e-6)  # R = A + V_old
    # Whitening is over every completion token of the batch; returns stay unwhitened.
    adv, ret2, _ = ppo_advantages(v, [1.0, 0.0], gamma=1.0, lam=0.0, whitening="masked_batch")
    flat = np.concatenate(adv)
    assert abs(flat.mean()) < 1e-6 and abs(flat.std() - 1.0) < 1e-4
    np.testing.assert_allclose(ret2[0], ret[0])


def test_ppo_knobs_are_checked():
    assert {"gamma", "lam", "whiten", "value_coef", "value_clip", "verify_weight"} <= set(method_knobs("ppo_v"))
    with pytest.raises(ValueError, match="whiten"):
        PPO(whiten="group")
    with pytest.raises(ValueError, match="GAE"):
        PPO(ddof=0)
    with pytest.raises(ValueError, match="clip_eps"):
        PPO(value_clip=0.0)
    names = [t.name for t in make_method({"name": "ppo_v"}).terms()]
    assert names == ["pg", "value", "verify"]


def test_presets_build_their_methods():
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config

    want = {"ppo": ["pg", "value"], "ppo_v": ["pg", "value", "verify"], "vineppo_qwen25_math_1p5b": ["pg", "verify"]}
    root = os.path.join(os.path.dirname(__file__), "..", "jaxrl_reason", "configs")
    for name, terms in want.items():
        rc = read_run_config(load_config_file(os.path.join(root, f"{name}.py"), []))
        assert [t.name for t in make_method(rc.method).terms()] == terms, name
    rc = read_run_config(load_config_file(os.path.join(root, "vineppo_qwen25_math_1p5b.py"), []))
    assert rc.method.extra["vine_samples"] == 9 and rc.rl.prompts_per_step == 32 and rc.rl.samples_per_prompt == 5


# ---------------------------------------------------------------------------------------------- the fused update


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return arith_tokenizer(str(tmp_path_factory.mktemp("tok")))


class _NoSample:
    def __call__(self, *a, **k):
        raise AssertionError("ppo samples nothing beyond the rollouts")


def _fixed_rollouts(tok):
    ex = arithmetic_examples(2, seed=3, config=ARITH)
    prompts = [tok.encode(tok.render_prompt(e.question)) for e in ex]
    rng = np.random.default_rng(0)
    comps = [list(rng.integers(5, tok.vocab_size, n)) for n in (6, 9, 4, 7)]
    rewards = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    lps = [np.zeros(len(c), np.float32) for c in comps]
    return Rollouts(ex, prompts, comps, lps, ["x"] * 4, rewards, ["eos"] * 4, [{}] * 4)


@pytest.mark.slow  # 21 s a call on 2 shared cores (2026-12-07)
def test_value_loss_lowers_value_error_through_the_fused_update(tok):
    model = attach_value_head(tiny_model(tok, seed=1))
    method = PPO(value_coef=1.0, value_clip=1.0)
    tr = start_training(model, optax.adam(3e-3), method.terms())
    ctx = Context(tok, _NoSample(), parity_reward, np.random.default_rng(0), tok.pad_id, model, tr.params,
                  max_new_tokens=16)
    batch, m = method.build(_fixed_rollouts(tok), ctx)
    assert m["ppo/old_value_mean"] == 0.0  # a zero head
    batch = pad_rows_to(batch, 8)
    params, opt_state, mse, ev = tr.params, tr.opt_state, [], []
    for _ in range(10):  # a fixed batch: the returns (the rewards, gamma = lambda = 1) do not move
        out = tr.update(params, opt_state, batch)
        assert all(bool(v) for v in out.finite.values())
        params, opt_state = out.params, out.opt_state
        mse.append(float(out.metrics["value/mse"]))
        ev.append(float(out.metrics["value/explained_variance"]))
    assert "loss/value" in out.metrics and "loss/pg" in out.metrics
    assert mse[-1] < 0.5 * mse[0], mse
    assert ev[-1] > ev[0] and ev[-1] > 0.3, ev


# ---------------------------------------------------------------------------------------------- the trainer


def _trainer(tok, workdir, method="ppo", steps=2):
    cfg = TrainerConfig(steps=steps, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=8, lr=3e-3,
                        checkpoint_every=1, progress=False, seed=5)
    return Trainer(tiny_model(tok, seed=2), tok, make_method({"name": method}),
                   arithmetic_examples(32, seed=1, config=ARITH), parity_reward, cfg, workdir)


def _head(params):
    return {k: np.asarray(v) for k, v in nnx.to_pure_dict(params)["value_head"].items()}


@pytest.fixture(scope="module")
def ppo_runs(tok, tmp_path_factory):
    """One PPO run of 2 steps, checkpointed after step 1 (`stop_after`) and continued in process; and a second
    trainer that resumes from a copy of that step-1 checkpoint, as a killed run would."""
    a_dir, b_dir = str(tmp_path_factory.mktemp("a")), str(tmp_path_factory.mktemp("b"))
    a = _trainer(tok, a_dir)
    first = a.run(stop_after=1)
    at_step1 = jax.tree.map(np.asarray, a.state.params)
    shutil.copytree(os.path.join(a_dir, "checkpoints"), os.path.join(b_dir, "checkpoints"))
    rest = a.run()
    a.close()
    b = _trainer(tok, b_dir)
    restored = jax.tree.map(np.asarray, b.state.params)
    resumed = b.run()
    b.close()
    return dict(a=a, b=b, first=first, rest=rest, resumed=resumed, at_step1=at_step1, restored=restored)


@pytest.mark.slow
def test_ppo_trainer_steps_end_to_end_and_log_the_value_term(ppo_runs):
    m = ppo_runs["first"][0]
    for k in ("loss/pg", "loss/value", "value/mse", "value/explained_variance", "value/clip_frac",
              "ppo/old_value_mean", "ppo/return_mean"):
        assert k in m, k
    assert "value/entropy" not in m and "value/ev_ret" not in m
    head0, head1 = _head(ppo_runs["at_step1"]), _head(ppo_runs["a"].state.params)
    assert np.abs(head0["kernel"]).max() > 0  # the zero head learned in step 1
    assert np.abs(head1["kernel"] - head0["kernel"]).max() > 0
    # Step 2's value rows hold a non-zero V_old where solve rows hold log pi_old: the sampler/trainer gap must read
    # only the latter (it is ~0 here: one f32 model samples and trains).
    assert ppo_runs["rest"][0]["ppo/old_value_mean"] != 0.0 and ppo_runs["rest"][0]["logprob_gap/max"] < 1e-3


@pytest.mark.slow
def test_value_head_survives_save_restore_and_kill_and_resume(ppo_runs):
    # Restore: the step-1 params, the value head included, exactly.
    assert int(ppo_runs["b"].state.step) == 2
    for x, y in zip(jax.tree.leaves(ppo_runs["at_step1"]), jax.tree.leaves(ppo_runs["restored"])):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(_head(ppo_runs["at_step1"])["kernel"], _head(ppo_runs["restored"])["kernel"])
    # Resume: step 2 after the restart equals step 2 of the uninterrupted run, params and metrics.
    for x, y in zip(jax.tree.leaves(ppo_runs["a"].state.params), jax.tree.leaves(ppo_runs["b"].state.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for k in ("loss/value", "value/mse", "loss/pg", "reward/mean"):
        assert ppo_runs["resumed"][0][k] == ppo_runs["rest"][0][k], k


@pytest.mark.slow
def test_ppo_v_logs_verify_and_value_terms(tok, tmp_path):
    tr = _trainer(tok, str(tmp_path), method="ppo_v", steps=1)
    m = tr.train_step()
    tr.close()
    for k in ("loss/pg", "loss/value", "loss/verify", "value/explained_variance", "verify/rows", "verify/nll"):
        assert k in m, k


# ---------------------------------------------------------------------------------------------- a separate critic


def _critic_params(params):
    return nnx.to_pure_dict(params)["critic"]


def test_separate_critic_starts_as_the_policy_and_reads_only_its_own_params(tok):
    model = tiny_model(tok, seed=1)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, tok.vocab_size, (2, 9)), jnp.int32)
    before = _logits(model, tokens)
    attach_critic(model)
    assert model.value_source == "separate" and model.value_head is None
    np.testing.assert_array_equal(_logits(model, tokens), before)  # the LM path never reads the critic
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    critic = dict(pure.pop("critic"))
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(critic.pop("value_head")))
    for a, b in zip(jax.tree.leaves(pure), jax.tree.leaves(critic)):  # init="policy": a copy of the trunk
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="shared value head"):
        attach_critic(attach_value_head(tiny_model(tok, seed=1)))
    with pytest.raises(ValueError, match="critic_init"):
        PPO(critic="separate", critic_init="zeros")
    with pytest.raises(ValueError, match="critic_lr_scale apply to"):
        PPO(critic_lr_scale=10.0)


@pytest.mark.slow  # 50 s a call on 2 shared cores (2026-12-07)
def test_separate_critic_is_trained_by_the_value_loss_alone(tok):
    rollouts = _fixed_rollouts(tok)

    def steps(value_coef, n=6):
        model = attach_critic(tiny_model(tok, seed=1))
        method = PPO(value_coef=value_coef, value_clip=1.0, critic="separate")
        tr = start_training(model, optax.adam(3e-3), method.terms())
        ctx = Context(tok, _NoSample(), parity_reward, np.random.default_rng(0), tok.pad_id, model, tr.params,
                      max_new_tokens=16)
        batch = pad_rows_to(method.build(rollouts, ctx)[0], 8)
        start = jax.tree.map(np.asarray, tr.params)  # the update donates its inputs
        params, opt_state, mse = tr.params, tr.opt_state, []
        for _ in range(n):
            out = tr.update(params, opt_state, batch)
            params, opt_state = out.params, out.opt_state
            mse.append(float(out.metrics.get("value/mse", np.nan)))  # no value term at value_coef 0
        return start, params, mse

    start, trained, mse = steps(1.0)
    assert mse[-1] < 0.5 * mse[0], mse
    moved = [float(np.abs(np.asarray(a) - np.asarray(b)).max())
             for a, b in zip(jax.tree.leaves(_critic_params(start)), jax.tree.leaves(_critic_params(trained)))]
    assert max(moved) > 0
    # Without the value loss the critic gets no gradient at all (Adam's step on a zero gradient is zero) while
    # the policy still moves: the policy loss never reaches the critic's trunk.
    start, trained, _ = steps(0.0)
    for a, b in zip(jax.tree.leaves(_critic_params(start)), jax.tree.leaves(_critic_params(trained))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    policy = lambda p: {k: v for k, v in nnx.to_pure_dict(p).items() if k != "critic"}  # noqa: E731
    assert any(float(np.abs(np.asarray(a) - np.asarray(b)).max()) > 0
               for a, b in zip(jax.tree.leaves(policy(start)), jax.tree.leaves(policy(trained))))


def test_critic_has_its_own_learning_rate_and_gradient_clip(tok):
    from jaxrl_reason.train.state import make_optimizer

    params = nnx.state(attach_critic(tiny_model(tok, seed=1)), nnx.Param)
    grads = jax.tree.map(jnp.ones_like, params)
    critic_big = jax.tree_util.tree_map_with_path(
        lambda path, g: g * (1e6 if str(path[0].key) == "critic" else 1.0), grads)

    def first_step(scale, g):
        opt = make_optimizer(1e-2, total_steps=10, clip_norm=1.0, critic_lr_scale=scale)
        return nnx.to_pure_dict(opt.update(g, opt.init(params), params)[0])

    one, half, big = first_step(1.0, grads), first_step(0.5, grads), first_step(1.0, critic_big)
    for a, b in zip(jax.tree.leaves(one["critic"]), jax.tree.leaves(half["critic"])):
        np.testing.assert_allclose(np.asarray(b), 0.5 * np.asarray(a), rtol=1e-6)
    rest = lambda d: [v for k, v in d.items() if k != "critic"]  # noqa: E731
    for a, b in zip(jax.tree.leaves(rest(one)), jax.tree.leaves(rest(half))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A huge critic gradient is clipped on its own: the policy's step is the same as with a small one.
    for a, b in zip(jax.tree.leaves(rest(one)), jax.tree.leaves(rest(big))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture(scope="module")
def critic_runs(tok, tmp_path_factory):
    """As `ppo_runs`, with critic="separate": 2 steps checkpointed after step 1, and a resumed copy."""
    a_dir, b_dir = str(tmp_path_factory.mktemp("ca")), str(tmp_path_factory.mktemp("cb"))

    def trainer(workdir):
        cfg = TrainerConfig(steps=2, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=8, lr=3e-3,
                            checkpoint_every=1, progress=False, seed=5)
        method = make_method({"name": "ppo", "extra": {"critic": "separate", "critic_lr_scale": 2.0}})
        return Trainer(tiny_model(tok, seed=2), tok, method, arithmetic_examples(32, seed=1, config=ARITH),
                       parity_reward, cfg, workdir)

    a = trainer(a_dir)
    first = a.run(stop_after=1)
    at_step1 = jax.tree.map(np.asarray, a.state.params)
    shutil.copytree(os.path.join(a_dir, "checkpoints"), os.path.join(b_dir, "checkpoints"))
    rest = a.run()
    a.close()
    b = trainer(b_dir)
    restored = jax.tree.map(np.asarray, b.state.params)
    resumed = b.run()
    b.close()
    return dict(a=a, b=b, first=first, rest=rest, resumed=resumed, at_step1=at_step1, restored=restored)


@pytest.mark.slow
def test_separate_critic_trains_checkpoints_resumes_and_exports(critic_runs, tmp_path):
    m = critic_runs["first"][0]
    assert "loss/value" in m and "value/explained_variance" in m and "loss/pg" in m
    head1 = nnx.to_pure_dict(critic_runs["at_step1"])["critic"]["value_head"]
    assert np.abs(np.asarray(head1["kernel"])).max() > 0  # the critic's zero head learned in step 1
    assert critic_runs["rest"][0]["ppo/old_value_mean"] != 0.0
    for x, y in zip(jax.tree.leaves(critic_runs["at_step1"]), jax.tree.leaves(critic_runs["restored"])):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(jax.tree.leaves(critic_runs["a"].state.params), jax.tree.leaves(critic_runs["b"].state.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for k in ("loss/value", "value/mse", "loss/pg", "reward/mean"):
        assert critic_runs["resumed"][0][k] == critic_runs["rest"][0][k], k
    # HF export: the policy alone by default; on request the critic as its own loadable directory.
    model = critic_runs["a"].model
    nnx.update(model, critic_runs["a"].state.params)
    path = str(tmp_path / "hf")
    save_pretrained(model, path, value_head="separate")
    loaded = load_pretrained(os.path.join(path, "critic"), value_head=True)
    tokens = jnp.asarray([[3, 7, 9, 4, 11]], jnp.int32)
    pos = jnp.arange(5)[None]
    h, _ = loaded.hidden_states(tokens, pos)
    want, _ = model.critic.hidden_states(tokens, pos)
    np.testing.assert_allclose(np.asarray(loaded.values_from_hidden(h)),
                               np.asarray(model.critic.values_from_hidden(want)), atol=1e-5)
    save_pretrained(model, path)  # "drop": the stale critic directory goes too
    assert not os.path.exists(os.path.join(path, "critic"))
    assert os.path.exists(os.path.join(path, "model.safetensors"))


@pytest.mark.slow  # 52 s a call on 2 shared cores (2026-12-07)
def test_ppo_composes_with_every_aggregation(tok, critic="separate"):
    # The aggregation is the pg term's alone; the value term (token mean) sits beside it in every case.
    from jaxrl_reason.rl.losses import AGGREGATIONS

    rollouts = _fixed_rollouts(tok)
    losses = {}
    for agg in AGGREGATIONS:
        model = tiny_model(tok, seed=1)
        model = attach_value_head(model) if critic == "head" else attach_critic(model)
        max_len = {"max_len": 16} if agg == "seq_mean_token_sum_norm" else {}
        method = make_method({"name": "ppo", "aggregation": agg, **max_len, "extra": {"critic": critic}})
        assert [t.aggregation for t in method.terms() if t.name == "pg"] == [agg]
        tr = start_training(model, optax.adam(1e-3), method.terms())
        ctx = Context(tok, _NoSample(), parity_reward, np.random.default_rng(0), tok.pad_id, model, tr.params,
                      max_new_tokens=16)
        out = tr.update(tr.params, tr.opt_state, pad_rows_to(method.build(rollouts, ctx)[0], 8))
        assert all(bool(v) for v in out.finite.values()), agg
        losses[agg] = float(out.metrics["loss/pg"])
        assert "loss/value" in out.metrics
    # The aggregations weigh the rows' tokens differently (lengths 6, 9, 4, 7): the pg losses differ.
    assert len({round(v, 7) for v in losses.values()}) == len(AGGREGATIONS), losses
