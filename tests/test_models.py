"""Our decoder computes what the Hugging Face checkpoint computes (Qwen2, Qwen2.5, Qwen3, Llama)."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from hf_fixtures import VARIANTS, save_hf_model, torch_logits
from jaxrl_reason.models.hf_port import (CheckpointTensors, load_pretrained, save_pretrained,
                                          write_safetensors)
from jaxrl_reason.models.qwen2 import ModelConfig, init_model, positions_from_mask

T = 64


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in VARIANTS:
        path = str(root / kind)
        out[kind] = (path, save_hf_model(kind, path, seed=1))
    return out


def padded_batch(vocab, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (3, T))
    mask = np.ones((3, T), np.int32)
    mask[1, :7] = 0  # left padding
    mask[2, 40:] = 0  # right padding
    return tokens, mask


def ours(model, tokens, mask):
    return np.asarray(model(jnp.asarray(tokens), positions_from_mask(jnp.asarray(mask)), jnp.asarray(mask)))


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_logits_match_transformers(checkpoints, kind):
    path, hf = checkpoints[kind]
    model = load_pretrained(path)
    tokens, mask = padded_batch(model.config.vocab_size)
    err = np.abs(ours(model, tokens, mask) - torch_logits(hf, tokens, mask)) * mask[..., None]
    assert err.max() < 1e-4, err.max()


def test_config_flags_are_read(checkpoints):
    q2 = load_pretrained(checkpoints["qwen2"][0]).config
    q25 = load_pretrained(checkpoints["qwen2.5"][0]).config
    q3 = load_pretrained(checkpoints["qwen3"][0]).config
    assert q2.attention_bias and not q2.qk_norm and not q2.tie_word_embeddings and q2.num_key_value_heads == 2
    assert q25.tie_word_embeddings and q25.num_key_value_heads == 1 and q25.rope_theta == 1e6
    assert q3.qk_norm and not q3.attention_bias and q3.head_dim == 32


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
def test_save_pretrained_roundtrip_through_transformers(checkpoints, kind, tmp_path):
    import transformers

    path, hf = checkpoints[kind]
    model = load_pretrained(path)
    out = str(tmp_path / "saved")
    save_pretrained(model, out)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokens, mask = padded_batch(model.config.vocab_size, seed=3)
    a = torch_logits(reloaded, tokens, mask)
    b = torch_logits(hf, tokens, mask)
    assert np.abs((a - b) * mask[..., None]).max() == 0.0
    # and our own reload is bit-identical
    again = load_pretrained(out)
    np.testing.assert_array_equal(ours(again, tokens, mask), ours(model, tokens, mask))


def test_sharded_checkpoint_roundtrip(checkpoints, tmp_path):
    model = load_pretrained(checkpoints["qwen2"][0])
    out = str(tmp_path / "sharded")
    save_pretrained(model, out, max_shard_bytes=20_000)
    files = os.listdir(out)
    assert "model.safetensors.index.json" in files
    assert sum(f.endswith(".safetensors") for f in files) > 2
    tokens, mask = padded_batch(model.config.vocab_size)
    np.testing.assert_array_equal(ours(load_pretrained(out), tokens, mask), ours(model, tokens, mask))


def test_unrolled_layers_equal_scanned(checkpoints):
    path, _ = checkpoints["qwen3"]
    tokens, mask = padded_batch(97)
    a = ours(load_pretrained(path), tokens, mask)
    b = ours(load_pretrained(path, scan_layers=False), tokens, mask)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_bfloat16_params_and_compute(checkpoints):
    path, hf = checkpoints["qwen2"]
    tokens, mask = padded_batch(97)
    ref = torch_logits(hf, tokens, mask)
    m16 = load_pretrained(path, dtype="bfloat16")
    leaf = m16.layers.mlp.up_proj.kernel[...]
    assert leaf.dtype == jnp.bfloat16
    got = ours(m16, tokens, mask)
    assert got.dtype == np.float32
    err = np.abs(got - ref) * mask[..., None]
    assert 0 < err.max() < 0.05  # bf16 is visibly different from f32 but close
    mixed = load_pretrained(path, dtype="float32", compute_dtype="bfloat16")
    assert mixed.layers.mlp.up_proj.kernel[...].dtype == jnp.float32
    assert np.abs((ours(mixed, tokens, mask) - ref) * mask[..., None]).max() < 0.05


# ---------------------------------------------------------------------------------------------- bad input

def _copy_with(src, dst, drop=None, reshape=None, config_patch=None):
    os.makedirs(dst, exist_ok=True)
    t = CheckpointTensors(src)
    tensors = {n: np.array(t.get(n)) for n in t.names() if n != drop}
    if reshape:
        tensors[reshape] = tensors[reshape][..., :-1]
    write_safetensors(os.path.join(dst, "model.safetensors"), tensors)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(config_patch or {})
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
    return dst


def test_missing_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pretrained(str(tmp_path / "nowhere"))
    os.makedirs(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(str(tmp_path / "empty"))


def test_missing_weights_file(checkpoints, tmp_path):
    d = _copy_with(checkpoints["qwen2"][0], str(tmp_path / "c"))
    os.remove(os.path.join(d, "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_pretrained(d)


def test_missing_tensor_named(checkpoints, tmp_path):
    d = _copy_with(checkpoints["qwen2"][0], str(tmp_path / "c"), drop="model.layers.1.self_attn.k_proj.bias")
    with pytest.raises(KeyError, match=r"model\.layers\.1\.self_attn\.k_proj\.bias"):
        load_pretrained(d)


def test_shape_mismatch_named(checkpoints, tmp_path):
    d = _copy_with(checkpoints["qwen2"][0], str(tmp_path / "c"), reshape="model.layers.0.mlp.up_proj.weight")
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.up_proj\.weight"):
        load_pretrained(d)


@pytest.mark.parametrize("patch,field", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "model_type"),
    ({"use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, "rope_scaling"),
])
def test_unsupported_config_fields_named(checkpoints, tmp_path, patch, field):
    d = _copy_with(checkpoints["qwen2"][0], str(tmp_path / "c"), config_patch=patch)
    with pytest.raises(ValueError, match=field):
        load_pretrained(d)


def test_config_validation():
    with pytest.raises(ValueError, match="num_key_value_heads"):
        ModelConfig(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="dtype"):
        ModelConfig(dtype="float8")


def test_param_count_matches_tree():
    import jax
    from flax import nnx

    for cfg in (ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2),
                ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=1, qk_norm=True, attention_bias=False,
                            tie_word_embeddings=True, head_dim=16)):
        m = init_model(cfg)
        n = sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
        assert n == cfg.num_params()


@pytest.mark.slow  # 26 s a call on 2 shared cores (2026-12-07)
def test_remat_and_matmul_residuals_give_the_same_gradients_with_less_saved_memory():
    import dataclasses

    import jax
    from flax import nnx

    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (4, 48)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(48), (4, 48))

    def grads_and_temp(config):
        graphdef, params = nnx.split(init_model(config, seed=0))

        def loss(p):
            logits = nnx.merge(graphdef, p)(tokens, positions)
            return jnp.mean(jax.nn.log_softmax(logits)[..., 0])

        fn = jax.jit(jax.grad(loss))
        temp = fn.lower(params).compile().memory_analysis().temp_size_in_bytes
        return fn(params), temp

    g_plain, temp_plain = grads_and_temp(dataclasses.replace(cfg, scan_residuals="all"))
    g_mm, temp_mm = grads_and_temp(cfg)  # the default: keep matmul outputs, recompute the rest
    g_remat, temp_remat = grads_and_temp(dataclasses.replace(cfg, remat=True))
    same = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    jax.tree.map(same, g_plain, g_remat)
    jax.tree.map(same, g_plain, g_mm)
    # The MLP intermediates (8x the hidden size) are no longer saved per layer; keeping only the matmul outputs
    # drops the activation and product of the MLP (and the attention intermediates) but keeps gate and up.
    assert temp_remat < 0.75 * temp_plain, (temp_remat, temp_plain)
    assert temp_remat < temp_mm < temp_plain, (temp_remat, temp_mm, temp_plain)
    with pytest.raises(ValueError, match="scan_layers=True"):
        ModelConfig(remat=True, scan_layers=False)
    with pytest.raises(ValueError, match="scan_residuals"):
        ModelConfig(scan_residuals="some")
