"""LoRA policies: adapters start at the base and move it, only they train and hold optimizer state, the KL
reference is the base with the adapters off (no copy), the sampler runs the adapted policy, a killed run resumes
bit-exactly, and the typed `lora` section refuses bad input."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.models.lora import (TARGETS, TRAINABLE, LoraConfig, adapted, attach_lora, base_graphdef, base_state,
                                      count_params, lora_config_of, peft_config)
from jaxrl_reason.rl.batch import build_token_batch
from jaxrl_reason.rl.losses import pg_spec
from jaxrl_reason.rl.scoring import model_logprobs, reference_logprobs
from jaxrl_reason.sampling.sampler import sample
from jaxrl_reason.train.state import make_optimizer
from jaxrl_reason.train.trainer import Trainer, TrainerConfig
from jaxrl_reason.train.update import make_update, split_trainable

from test_trainer import length_parity_reward
from tiny import ARITH, arith_tokenizer, tiny_model

RANK = 4


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return arith_tokenizer(tmp_path_factory.mktemp("tok"))


def small_batch(advantages):
    prompts = [[5, 6, 7], [5, 6, 8], [9, 10], [11, 12, 13, 14]]
    completions = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    return build_token_batch(prompts, completions, advantages, [[-3.0] * len(c) for c in completions], "solve",
                             length=16)


def moment_size(opt_state) -> int:
    """Elements of the optimizer state's non-scalar leaves (Adam's moments)."""
    return int(sum(x.size for x in jax.tree.leaves(opt_state) if np.ndim(x)))


def randomise_adapters(model, seed=0, std=0.3):
    """Non-zero B (and a fresh A) so the adapted policy differs from its base."""
    key = jax.random.PRNGKey(seed)
    for i, lin in enumerate(adapted(model).values()):
        ka, kb = jax.random.split(jax.random.fold_in(key, i))
        lin.lora.lora_a[...] = std * jax.random.normal(ka, lin.lora.lora_a.shape)
        lin.lora.lora_b[...] = std * jax.random.normal(kb, lin.lora.lora_b.shape)
    return model


@pytest.mark.slow  # 35 s a call on 2 shared cores (2026-12-07)
def test_adapters_start_at_the_base_and_move_it(tokenizer):
    model = tiny_model(tokenizer)
    tokens = jnp.arange(12)[None] % tokenizer.vocab_size
    positions = jnp.arange(12)[None]
    base = np.asarray(model(tokens, positions))
    attach_lora(model, LoraConfig(rank=RANK), seed=1)
    assert sorted(adapted(model)) == sorted(TARGETS)
    np.testing.assert_array_equal(np.asarray(model(tokens, positions)), base)  # B = 0: the base exactly
    randomise_adapters(model)
    assert np.abs(np.asarray(model(tokens, positions)) - base).max() > 1e-2
    with pytest.raises(ValueError, match="already has adapters"):
        attach_lora(model, LoraConfig(rank=RANK))


@pytest.mark.slow  # 22 s a call on 2 shared cores (2026-12-07)
def test_only_adapters_train_and_hold_optimizer_state(tokenizer):
    model = attach_lora(tiny_model(tokenizer), LoraConfig(rank=RANK), seed=1)
    graphdef, params = nnx.split(model)
    train, frozen = split_trainable(params, TRAINABLE)
    opt = make_optimizer(1e-2, total_steps=10, clip_norm=0.0)
    opt_state = opt.init(train)
    # Adam's two moments of the adapters only: a small fraction of the model's size.
    n_train, n_all = count_params(train), count_params(params)
    assert moment_size(opt_state) == 2 * n_train  # mu and nu, beside scalar step counts
    assert n_train < 0.2 * n_all
    update = make_update(graphdef, opt, (pg_spec(("solve",)),), trainable=TRAINABLE)
    batch = small_batch([1.0, -1.0, 0.5, 0.0])
    batch = batch._replace(old_logprobs=np.asarray(model_logprobs(graphdef, params, batch)[0]) * batch.loss_mask)
    before = jax.tree.map(np.asarray, params)
    out = update(jax.tree.map(jnp.copy, params), opt_state, batch)
    assert all(bool(v) for v in out.finite.values())
    new_train, new_frozen = split_trainable(out.params, TRAINABLE)
    old_train, old_frozen = split_trainable(before, TRAINABLE)
    for a, b in zip(jax.tree.leaves(new_frozen), jax.tree.leaves(old_frozen)):
        np.testing.assert_array_equal(np.asarray(a), b)  # the base is untouched, bit for bit
    moved = max(float(np.abs(np.asarray(a) - b).max()) for a, b in zip(jax.tree.leaves(new_train),
                                                                       jax.tree.leaves(old_train)))
    assert moved > 1e-3
    lp = lambda p: np.asarray((model_logprobs(graphdef, p, batch)[0] * batch.loss_mask).sum(-1))  # noqa: E731
    after, start = lp(out.params), lp(before)
    assert after[0] > start[0] + 1e-3 and after[1] < start[1] - 1e-3  # advantage direction, through the adapters


def test_adapter_dropout_drops_input_features_and_is_unbiased(tokenizer):
    """lora.dropout zeroes the adapter's input features (the frozen x @ W never), scales the kept ones by
    1 / (1 - p) so the adapter's output is unbiased, and a dropped feature's row of A gets no gradient."""
    p = 0.5
    model = randomise_adapters(attach_lora(tiny_model(tokenizer), LoraConfig(rank=RANK, dropout=p), seed=1))
    assert lora_config_of(model).dropout == p and peft_config(model)["lora_dropout"] == p
    lin = adapted(model)["up_proj"]
    layer = nnx.merge(nnx.graphdef(model.layers), model.unstack_layers()[0]).mlp.up_proj
    x = jax.random.normal(jax.random.PRNGKey(0), (1, layer.kernel.shape[0]))
    plain = np.asarray(layer.adapter(x))
    np.testing.assert_array_equal(np.asarray(layer.adapter(x, None)), plain)  # no key: no dropout
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    dropped = np.asarray(jax.vmap(lambda k: layer.adapter(x, k))(keys))
    assert np.abs(dropped[0] - plain).max() > 1e-3 and np.abs(dropped[0] - dropped[1]).max() > 1e-3
    # unbiased: the mean over masks is the undropped output (to a few standard errors)
    se = dropped.std(0) / np.sqrt(len(keys))
    assert np.all(np.abs(dropped.mean(0) - plain) < 5 * se + 1e-6)
    # the gradient reaches A's row i only through x_i: exactly the dropped features' rows are zero, and a kept
    # row is x_i / (1 - p) times the column sums of scale * B
    graphdef, state = nnx.split(layer)
    grads = jax.grad(lambda st: nnx.merge(graphdef, st).adapter(x, keys[0]).sum())(state)
    grad = np.asarray(grads["lora"]["lora_a"][...])
    zero_rows = np.all(grad == 0, axis=1)
    assert 0.25 < zero_rows.mean() < 0.75
    b_sums = np.asarray(layer.lora_scale * layer.lora.lora_b[...]).sum(-1)
    want = np.asarray(x[0])[:, None] / (1 - p) * b_sums[None, :]
    np.testing.assert_allclose(grad[~zero_rows], want[~zero_rows], rtol=1e-4, atol=1e-6)
    assert lin.lora_dropout == p


def test_update_drops_adapter_features_only_with_a_key(tokenizer):
    """The update's `key` drives the dropout: same key, same update; another key, another; no key, the update of
    the dropout-free policy, bit for bit. The dropped forward no longer scores the sampler's pi_old exactly
    (logprob_gap > 0), which the dropout-free update does."""
    def setup(dropout):
        model = randomise_adapters(attach_lora(tiny_model(tokenizer), LoraConfig(rank=RANK, dropout=dropout), seed=1))
        graphdef, params = nnx.split(model)
        batch = small_batch([1.0, -1.0, 0.5, 0.0])
        batch = batch._replace(old_logprobs=np.asarray(model_logprobs(graphdef, params, batch)[0]) * batch.loss_mask)
        opt = make_optimizer(1e-2, total_steps=10, clip_norm=0.0)
        update = make_update(graphdef, opt, (pg_spec(("solve",)),), trainable=TRAINABLE, micro_batches=2)
        run = lambda key: update(jax.tree.map(jnp.copy, params), opt.init(split_trainable(params, TRAINABLE)[0]),  # noqa: E731
                                 batch, key=key)
        return run

    with_dropout, without = setup(0.3), setup(0.0)
    k0, k1 = jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    a, b, c, none = with_dropout(k0), with_dropout(k0), with_dropout(k1), with_dropout(None)
    plain = without(k0)
    leaves = lambda out: [np.asarray(x) for x in jax.tree.leaves(out.params)]  # noqa: E731
    for x, y in zip(leaves(a), leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert max(np.abs(x - y).max() for x, y in zip(leaves(a), leaves(c))) > 1e-6
    for x, y in zip(leaves(none), leaves(plain)):  # no key, or p = 0: the forward without dropout
        np.testing.assert_array_equal(x, y)
    assert float(a.metrics["logprob_gap/mean"]) > 1e-3 and float(plain.metrics["logprob_gap/mean"]) < 1e-5


def make_trainer(tokenizer, workdir, steps=3, lora=LoraConfig(rank=RANK), beta=0.05, **kw):
    model = tiny_model(tokenizer, seed=3)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=steps, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=12, lr=1e-2,
                        checkpoint_every=1, progress=False, seed=11, **kw)
    return Trainer(model, tokenizer, GRPO("grpo", PolicyLossConfig(beta=beta)), train, length_parity_reward, cfg,
                   workdir, lora=lora)


@pytest.mark.slow  # 80 s a call on 2 shared cores (2026-12-07)
def test_reference_is_the_base_with_adapters_off_and_no_copy(tokenizer, tmp_path):
    base_model = tiny_model(tokenizer, seed=3)
    base_gd, base_params = nnx.split(base_model)
    tr = make_trainer(tokenizer, str(tmp_path), steps=2)
    assert tr.ref_params is None  # no frozen copy of the policy
    ref = tr.reference_params()
    own = {id(x) for x in jax.tree.leaves(tr.state.params)}
    assert all(id(x) in own for x in jax.tree.leaves(ref))  # the policy's own arrays, not copies
    history = tr.run()
    assert all(h["grad_norm"] > 0 for h in history) and history[-1]["solve/kl_ref"] > 0  # the policy moved off it
    batch = small_batch([1.0, -1.0, 0.5, 0.0])
    want = np.asarray(reference_logprobs(base_gd, base_params, batch))
    got = np.asarray(reference_logprobs(base_graphdef(tr.model), base_state(tr.state.params), batch))
    np.testing.assert_array_equal(got, want)  # the untouched base, bit for bit, after training
    policy = np.asarray(reference_logprobs(tr.graphdef, tr.state.params, batch))
    assert np.abs(policy - want)[batch.loss_mask != 0].max() > 1e-3
    tr.close()


@pytest.mark.slow  # 28 s a call on 2 shared cores (2026-12-07)
def test_sampler_runs_the_adapted_policy(tokenizer):
    """Greedy samples of a LoRA policy (prefill with the adapters beside W, decode on merged weights) are those of
    the same policy with the adapters merged into its kernels."""
    model = randomise_adapters(attach_lora(tiny_model(tokenizer), LoraConfig(rank=RANK), seed=1))
    merged = tiny_model(tokenizer)
    for name, lin in adapted(model).items():
        part = merged.layers.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else merged.layers.mlp
        getattr(part, name).kernel[...] = lin.merged_kernel()
    base = tiny_model(tokenizer)
    prompts = [[5, 6, 7], [9, 10, 11, 12], [13]]
    kw = dict(max_new_tokens=10, temperature=0.0, pad_id=tokenizer.pad_id)
    got = sample(model, prompts, jax.random.PRNGKey(0), **kw)
    want = sample(merged, prompts, jax.random.PRNGKey(0), **kw)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)
    assert not np.array_equal(got.tokens, sample(base, prompts, jax.random.PRNGKey(0), **kw).tokens)
    model.config = dataclasses.replace(model.config, lora_decode="unmerged")  # adapters beside W at every token
    beside = sample(model, prompts, jax.random.PRNGKey(0), **kw)
    np.testing.assert_array_equal(beside.tokens, want.tokens)
    np.testing.assert_allclose(beside.logprobs, want.logprobs, atol=1e-4)


@pytest.mark.slow  # 148 s a call on 2 shared cores (2026-12-07)
def test_kill_and_resume_with_adapters_is_exact(tokenizer, tmp_path):
    """With adapter dropout on: its keys derive from the checkpointed step key, so resuming replays them."""
    keys = ("loss/pg", "loss/kl", "reward/mean", "grad_norm", "solve/kl_ref", "logprob_gap/mean")
    lora = LoraConfig(rank=RANK, dropout=0.2)
    full = make_trainer(tokenizer, str(tmp_path / "a"), steps=4, lora=lora)
    ref = full.run()
    full.close()
    assert ref[-1]["logprob_gap/mean"] > 1e-4  # the dropout ran (the adapters have moved off B = 0 by then)
    part = make_trainer(tokenizer, str(tmp_path / "b"), steps=4, lora=lora)
    first = part.run(stop_after=2)
    part.close()
    resumed = make_trainer(tokenizer, str(tmp_path / "b"), steps=4, lora=lora)
    assert int(resumed.state.step) == 2
    assert moment_size(resumed.state.opt_state) == 2 * count_params(split_trainable(resumed.state.params, TRAINABLE)[0])
    rest = resumed.run()
    for a, b in zip(ref, first + rest):
        for k in keys:
            assert a[k] == b[k], (k, a[k], b[k])
    assert ref[0]["grad_norm"] != ref[3]["grad_norm"]
    for a, b in zip(jax.tree.leaves(full.state.params), jax.tree.leaves(resumed.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    resumed.close()


def test_lora_config_refuses_bad_input():
    from jaxrl_reason.experiment.config import default_config, read_run_config
    from jaxrl_reason.knobs import UnknownKnobError

    cfg = default_config()
    cfg.lora.rank = 8
    rc = read_run_config(cfg)
    assert rc.lora.rank == 8 and rc.lora.scale == 16.0 / 8 and rc.lora.target_names == TARGETS
    bad = default_config().to_dict()
    bad["lora"]["rnak"] = 8
    with pytest.raises(UnknownKnobError, match="rnak"):
        read_run_config(bad)
    with pytest.raises(ValueError, match="lora.targets"):
        LoraConfig(rank=8, targets="q_proj,qkv")
    with pytest.raises(ValueError, match="lora.rank"):
        LoraConfig(rank=-1)
    for p in (1.0, -0.1):
        with pytest.raises(ValueError, match="lora.dropout"):
            LoraConfig(rank=8, dropout=p)
    assert not LoraConfig().enabled and dataclasses.replace(LoraConfig(), rank=2).enabled


@pytest.mark.slow
def test_sharded_lora_update_equals_one_device(tmp_path):
    """8 fake devices in a subprocess: the adapters laid out by the partition rules (A like its kernel's input, B
    like its output), the same losses as one device, the base untouched on every mesh."""
    import json
    import os
    import subprocess
    import sys

    from processes import cpu_devices_env

    out = tmp_path / "lora_parallel.json"
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, os.path.join(here, "lora_parallel_checks.py"), str(out)],
                          env=cpu_devices_env(8), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["reference_losses"][0] != res["reference_losses"][2] and res["param_moved"] > 1e-2
    for name in ("8,1,1", "2,2,2", "1,4,2"):
        r = res[name]
        np.testing.assert_allclose(r["losses"], res["reference_losses"], rtol=1e-6)
        assert r["param_max_diff"] < 1e-4 and r["base_moved"] == 0.0
        assert r["specs"] == r["expected_specs"]
    assert "P(None, 'fsdp', None)" in res["1,4,2"]["specs"]  # the adapters really are split
    assert "P(None, None, ('tp', 'fsdp'))" in res["1,4,2"]["specs"]


def test_peft_loads_the_exported_adapter_onto_the_base_with_the_same_logits(tmp_path):
    """hf_port.save_pretrained of a LoRA policy: the merged weights load in transformers, and the adapter
    directory beside them loads in `peft` onto the untouched HF base; both give our adapted policy's logits
    (float32, |diff| < 1e-4, the tolerance of the plain HF parity test). Adapters on only some projections, so
    the exported target_modules are read by peft, not assumed."""
    peft = pytest.importorskip("peft")
    import transformers
    from hf_fixtures import save_hf_model, torch_logits

    from jaxrl_reason.models.hf_port import load_pretrained, save_pretrained
    from jaxrl_reason.models.lora import ADAPTER_DIR
    from jaxrl_reason.models.qwen2 import positions_from_mask

    base_dir = str(tmp_path / "base")
    save_hf_model("qwen2", base_dir, seed=1)
    model = load_pretrained(base_dir)
    cfg = LoraConfig(rank=RANK, alpha=12.0, targets="q_proj,v_proj,o_proj,up_proj,down_proj")
    randomise_adapters(attach_lora(model, cfg, seed=2), std=0.2)
    out = str(tmp_path / "policy")
    save_pretrained(model, out, adapter_base=base_dir)

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.config.vocab_size, (2, 24))
    mask = np.ones_like(tokens)
    mask[1, :5] = 0  # left padding
    ours = np.asarray(model(jnp.asarray(tokens), positions_from_mask(jnp.asarray(mask)), jnp.asarray(mask)))
    keep = mask[..., None] != 0
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir).eval()
    plain = torch_logits(base, tokens, mask)
    assert np.abs((plain - ours) * keep).max() > 1e-2  # the adapters matter
    adapted_hf = peft.PeftModel.from_pretrained(base, os.path.join(out, ADAPTER_DIR)).eval()
    assert sorted(adapted_hf.peft_config["default"].target_modules) == sorted(cfg.target_names)
    np.testing.assert_array_less(np.abs((torch_logits(adapted_hf, tokens, mask) - ours) * keep).max(), 1e-4)
    merged = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    np.testing.assert_array_less(np.abs((torch_logits(merged, tokens, mask) - ours) * keep).max(), 1e-4)
    # saving a model without adapters over it removes the stale adapter directory
    save_pretrained(load_pretrained(base_dir), out)
    assert not os.path.exists(os.path.join(out, ADAPTER_DIR))


def test_memory_plan_counts_adapters_and_no_reference_copy():
    """The planner: a full fine-tuning KL run holds a reference copy of the params; a LoRA run holds none, and its
    optimizer state and gradients are the adapters' (hand count: r x (in + out) per projection and layer)."""
    from jaxrl_reason.models.qwen2 import ModelConfig
    from jaxrl_reason.parallel import memory

    cfg = ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    batch = memory.BatchSettings(train_rows=8, train_length=64)
    mesh = {"data": 1, "fsdp": 1, "tp": 1}
    full = memory.plan(cfg, mesh, batch, kl=True)
    lora = memory.plan(cfg, mesh, batch, kl=True, lora=LoraConfig(rank=RANK))
    assert full.reference == full.params == 4 * cfg.num_params() and lora.reference == 0
    h, d, i = 64, 16, 128
    io = (h + 4 * d) + 2 * (h + 2 * d) + (4 * d + h) + 2 * (h + i) + (i + h)  # q, k, v, o, gate, up, down
    adapters = 4 * RANK * io * cfg.num_hidden_layers
    assert lora.params == full.params + adapters
    # gradients: the accumulator and a micro-batch's, plus half a copy of the new adapters and optimizer state that
    # the guarded step holds before its finite check (`parallel.memory.plan`): all adapter-sized
    assert 2 * adapters <= lora.optimizer_state < 2 * adapters + 64
    assert lora.gradients == 2 * adapters + (adapters + lora.optimizer_state) // 2
    assert lora.peak < full.peak - full.params
    assert memory.plan(cfg, mesh, batch).reference == 0  # no KL, no reference
