"""Llama checkpoints through the shared decoder: HF `llama` directories load to what transformers computes and
round-trip through save_pretrained / load_pretrained unchanged, for the flags real checkpoints use (llama3, linear
and default rope; q/k/v/o and MLP biases; head_dim other than hidden / heads; tied and untied embeddings)."""
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from hf_fixtures import torch_logits
from jaxrl_reason.models.hf_port import load_pretrained, save_pretrained
from jaxrl_reason.models.qwen2 import Qwen2, positions_from_mask

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, rms_norm_eps=1e-5)
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
CONFIGS = {
    # Llama 3.1-style rope, every bias Llama allows, head_dim 24 != 64 / 4, GQA 4 -> 2
    "llama3_bias_head_dim": dict(num_key_value_heads=2, head_dim=24, attention_bias=True, mlp_bias=True,
                                 tie_word_embeddings=False, rope_parameters=LLAMA3),
    # Llama 3.2 1B-style small model: tied embeddings, a single KV head, plain rope
    "default_tied": dict(num_key_value_heads=1, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    # linear position interpolation (older long-context fine-tunes)
    "linear": dict(num_key_value_heads=4, tie_word_embeddings=False,
                   rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
}
T = 48


def make_llama(name, seed=0):
    import torch
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**BASE, **CONFIGS[name])).eval()
    with torch.no_grad():  # random init leaves norms at 1 and biases at 0: perturb them so every tensor is seen
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            elif pname.endswith("bias"):
                p.normal_(0, 0.05)
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("llama")
    out = {}
    for name in CONFIGS:
        hf = make_llama(name, seed=3)
        hf.save_pretrained(str(root / name))
        out[name] = (str(root / name), hf)
    return out


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, tokens, mask):
    return nnx.merge(graphdef, state)(tokens, positions_from_mask(mask), mask)


def ours(model, tokens, mask):
    graphdef, state = nnx.split(model)
    return np.asarray(_forward(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask)))


def batch(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, BASE["vocab_size"], (3, T))
    mask = np.ones((3, T), np.int32)
    mask[1, :11] = 0  # left padding
    mask[2, 30:] = 0  # right padding
    return tokens, mask


@pytest.mark.parametrize("name", list(CONFIGS))
def test_llama_logits_match_transformers(checkpoints, name):
    path, hf = checkpoints[name]
    tokens, mask = batch()
    err = np.abs(ours(load_pretrained(path), tokens, mask) - torch_logits(hf, tokens, mask)) * mask[..., None]
    assert err.max() < 1e-4, err.max()


def test_llama_flags_are_read(checkpoints):
    a = load_pretrained(checkpoints["llama3_bias_head_dim"][0]).config
    assert a.model_type == "llama" and a.head_dim == 24 and a.dim_per_head == 24
    assert a.attention_bias and a.o_proj_bias and a.mlp_bias and not a.qk_norm and not a.tie_word_embeddings
    assert a.rope_theta == 500000.0
    assert dict(a.rope_scaling) == {k: v for k, v in LLAMA3.items() if k != "rope_theta"}
    b = load_pretrained(checkpoints["default_tied"][0]).config
    assert b.rope_scaling is None and b.tie_word_embeddings and b.num_key_value_heads == 1
    assert not (b.attention_bias or b.o_proj_bias or b.mlp_bias) and b.dim_per_head == 16
    assert dict(load_pretrained(checkpoints["linear"][0]).config.rope_scaling) == {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize("name", ["llama3_bias_head_dim", "linear"])
def test_rope_scaling_changes_the_function(checkpoints, name):
    """The scaled rope is really used: the same weights with plain rope are far further from transformers than our
    float32 rounding."""
    path, hf = checkpoints[name]
    model = load_pretrained(path)
    _, state = nnx.split(model)
    plain_cfg = model.config.replace(rope_scaling=None)
    plain = nnx.merge(nnx.split(nnx.eval_shape(lambda: Qwen2(plain_cfg, rngs=nnx.Rngs(0))))[0], state)
    tokens, mask = batch(seed=1)
    reference = torch_logits(hf, tokens, mask)
    err = float((np.abs(ours(model, tokens, mask) - reference) * mask[..., None]).max())
    err_plain = float((np.abs(ours(plain, tokens, mask) - reference) * mask[..., None]).max())
    print(f"{name}: max-abs error vs transformers {err:.1e} with the scaling, {err_plain:.1e} without")
    assert err_plain > 50 * err


@pytest.mark.parametrize("name", list(CONFIGS))
def test_llama_roundtrip_through_save_pretrained(checkpoints, name, tmp_path):
    import transformers

    path, hf = checkpoints[name]
    model = load_pretrained(path)
    out = str(tmp_path / "saved")
    save_pretrained(model, out)
    tokens, mask = batch(seed=2)
    # our reload: bit-identical logits and config
    again = load_pretrained(out)
    assert again.config == model.config
    np.testing.assert_array_equal(ours(again, tokens, mask), ours(model, tokens, mask))
    # transformers reads the same model back: identical weights, so identical torch logits
    with open(os.path.join(out, "config.json")) as f:
        written = json.load(f)
    assert written["model_type"] == "llama" and written["head_dim"] == model.config.dim_per_head
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(reloaded, transformers.LlamaForCausalLM)
    assert np.abs((torch_logits(reloaded, tokens, mask) - torch_logits(hf, tokens, mask)) * mask[..., None]).max() == 0


@pytest.mark.parametrize("rope,field", [
    ({"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 64}, "rope_scaling"),
    ({"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}, "rope_scaling"),
])
def test_unsupported_rope_types_named(checkpoints, tmp_path, rope, field):
    path, _ = checkpoints["default_tied"]
    out = tmp_path / "bad"
    out.mkdir()
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["rope_parameters"] = rope
    (out / "config.json").write_text(json.dumps(cfg))
    os.symlink(os.path.join(path, "model.safetensors"), out / "model.safetensors")
    with pytest.raises(ValueError, match=f"{field}.*{rope['rope_type']}"):
        load_pretrained(str(out))
