"""GGUF import: our torch-free reader computes what transformers computes, on tiny synthetic files written the way
llama.cpp writes them and on the real SmolLM2-135M-Instruct Q4_1 file (slow tests)."""
import functools
import gc
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("gguf", reason="pip install gguf (llama.cpp's reader) for the GGUF import")
import gguf  # noqa: E402

from gguf_fixtures import (ARCH, llama3_freq_factors, permute_like_llama_cpp, smollm2_gguf_path,  # noqa: E402
                           write_gguf_from_hf)
from hf_fixtures import make_hf_model, torch_logits  # noqa: E402
from jaxrl_reason.models.gguf_port import (SUPPORTED_TENSOR_TYPES, GGUFCheckpoint, dequantize_tensor,  # noqa: E402
                                           gguf_to_hf, llama3_scaling_from_freq_factors, load_gguf,
                                           load_gguf_tokenizer, main)
from jaxrl_reason.models.hf_port import load_pretrained  # noqa: E402
from jaxrl_reason.models.qwen2 import ModelConfig, positions_from_mask, rope_inv_freq  # noqa: E402


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, tokens, mask):
    return nnx.merge(graphdef, state)(tokens, positions_from_mask(mask), mask)


def ours(model, tokens, mask):
    # Jitted on the graph structure: files of one architecture share a compiled forward across tests.
    graphdef, state = nnx.split(model)
    return np.asarray(_forward(graphdef, state, jnp.asarray(tokens), jnp.asarray(mask)))


def padded_batch(vocab, seed=0, t=40):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, (2, t))
    mask = np.ones((2, t), np.int32)
    mask[1, :9] = 0  # left padding
    return tokens, mask


def masked_max(a, b, mask):
    return float((np.abs(a - b) * mask[..., None]).max())


@pytest.fixture(scope="module")
def hf_models():
    return {kind: make_hf_model(kind, seed=2) for kind in ARCH}


def transformers_gguf_model(path):
    import torch
    import transformers

    folder, name = os.path.split(str(path))
    return transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


# ------------------------------------------------------------------------------------- synthetic llama.cpp files

def test_fixture_permutation_is_llama_cpps_pairing():
    # One head of width 6: llama.cpp pairs row i with row i + 3 and stores the pairs side by side.
    np.testing.assert_array_equal(permute_like_llama_cpp(np.arange(6), 1), [0, 3, 1, 4, 2, 5])
    # Two heads: each head is reordered on its own.
    np.testing.assert_array_equal(permute_like_llama_cpp(np.arange(8), 2), [0, 2, 1, 3, 4, 6, 5, 7])


@pytest.mark.parametrize("kind", list(ARCH))
def test_float32_file_computes_the_original_model(hf_models, kind, tmp_path):
    """F32 storage loses nothing, so the GGUF model must compute the HF model it was written from: names, q/k row
    order (Llama), biases (Qwen2), q/k norms and head_dim (Qwen3), tied embeddings and llama3 rope scaling read
    back from rope_freqs.weight (Llama)."""
    hf = hf_models[kind]
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf, kind)
    model, config = load_gguf(path)
    tokens, mask = padded_batch(hf.config.vocab_size)
    assert masked_max(ours(model, tokens, mask), torch_logits(hf, tokens, mask), mask) < 1e-4
    assert config["model_type"] == ARCH[kind]
    assert config["tie_word_embeddings"] == hf.config.tie_word_embeddings
    assert model.config.num_key_value_heads == hf.config.num_key_value_heads
    if kind == "llama":
        # head_dim 16 leaves one frequency between the llama3 bands, so the parameters are not unique; the
        # frequencies they give are.
        rope = dict(hf.config.rope_parameters)
        assert config["rope_parameters"]["rope_type"] == "llama3"
        want = ModelConfig(hidden_size=64, num_attention_heads=4, rope_theta=rope.pop("rope_theta"),
                           rope_scaling=tuple(sorted(rope.items())))
        np.testing.assert_allclose(rope_inv_freq(model.config), rope_inv_freq(want), rtol=1e-5)


@pytest.mark.parametrize("kind,qtype", [("llama", "Q4_0"), ("llama", "Q4_1"), ("llama", "Q8_0"), ("llama", "F16"),
                                        ("qwen2", "Q4_1"), ("qwen2.5", "Q8_0")])
def test_quantized_file_matches_transformers_gguf_loader(hf_models, kind, qtype, tmp_path):
    """Quantised weights are what the file holds, so the reference is transformers' own GGUF loader on the same
    file. transformers ignores rope_freqs.weight (so the Llama file here has no llama3 scaling) and a Qwen3 head_dim
    other than its default 128 (so Qwen3 is only checked in float32, against the original model)."""
    hf = hf_models[kind]
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf, kind, qtype, rope_freqs=False)
    model, _ = load_gguf(path)
    reference = transformers_gguf_model(path)
    tokens, mask = padded_batch(hf.config.vocab_size, seed=1)
    got = ours(model, tokens, mask)
    assert masked_max(got, torch_logits(reference, tokens, mask), mask) < 1e-4
    if kind != "llama":  # the original model differs visibly: the quantisation really happened
        assert masked_max(got, torch_logits(hf, tokens, mask), mask) > 1e-4


def _write_raw(path, tensors):
    """A GGUF holding just `tensors` {name: (array, ggml type name or None)}."""
    w = gguf.GGUFWriter(str(path), "llama")
    for name, (data, kind) in tensors.items():
        w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[kind] if kind else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def _f16(x):
    return np.frombuffer(np.float16(x).tobytes(), np.uint8)


def test_hand_built_blocks_decode_to_hand_computed_values(tmp_path):
    nibbles = np.array([j | ((15 - j) << 4) for j in range(16)], np.uint8)  # low nibble j, high nibble 15 - j
    q4 = np.concatenate([np.arange(16), 15 - np.arange(16)])  # element j: low nibble; element 16 + j: high nibble
    rows = {
        # Q8_0 block: fp16 scale, 32 signed bytes; value = d * q
        "q8_0": (np.stack([np.concatenate([_f16(0.25 * (r + 1)), np.arange(-16, 16).astype(np.int8).view(np.uint8)])
                           for r in range(2)]), "Q8_0"),
        # Q4_0 block: fp16 scale, 16 bytes of two 4-bit values; value = d * (q - 8)
        "q4_0": (np.stack([np.concatenate([_f16(0.5 * (r + 1)), nibbles]) for r in range(2)]), "Q4_0"),
        # Q4_1 block: fp16 scale, fp16 minimum, 16 bytes of nibbles; value = d * q + m
        "q4_1": (np.stack([np.concatenate([_f16(0.5 * (r + 1)), _f16(-1.0), nibbles]) for r in range(2)]), "Q4_1"),
        "f16": (np.array([[1.5, -2.25, 65504.0, 2 ** -24]], np.float16), None),
    }
    tensors = _write_raw(tmp_path / "blocks.gguf", rows)
    for r in range(2):
        np.testing.assert_array_equal(dequantize_tensor(tensors["q8_0"])[r], 0.25 * (r + 1) * np.arange(-16, 16))
        np.testing.assert_array_equal(dequantize_tensor(tensors["q4_0"])[r], 0.5 * (r + 1) * (q4 - 8))
        np.testing.assert_array_equal(dequantize_tensor(tensors["q4_1"])[r], 0.5 * (r + 1) * q4 - 1.0)
    assert dequantize_tensor(tensors["q8_0"]).shape == (2, 32)
    np.testing.assert_array_equal(dequantize_tensor(tensors["f16"]), [[1.5, -2.25, 65504.0, 2 ** -24]])


# (bytes per block, offsets of the fp16 scale fields) of the block layouts in ggml-common.h
_BLOCKS = {"Q4_0": (18, (0,)), "Q4_1": (20, (0, 2)), "Q8_0": (34, (0,)), "Q2_K": (84, (80, 82)),
           "Q3_K": (110, (108,)), "Q4_K": (144, (0, 2)), "Q5_K": (176, (0, 2)), "Q6_K": (210, (208,))}


@pytest.mark.parametrize("kind", list(_BLOCKS))
def test_dequantisation_matches_transformers_kernels(kind, tmp_path):
    """Random blocks (every bit pattern of the packed values, finite scales) decoded by the `gguf` package through
    our reader and by transformers' independent torch kernels."""
    import torch
    from transformers.integrations.gguf.dequant import dequantize as torch_dequantize

    block_bytes, scale_offsets = _BLOCKS[kind]
    qtype = gguf.GGMLQuantizationType[kind]
    block_elems = gguf.GGML_QUANT_SIZES[qtype][0]
    rows, blocks_per_row = 3, 2
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (rows * blocks_per_row, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        raw[:, off:off + 2] = rng.uniform(-0.1, 0.1, rows * blocks_per_row).astype(np.float16).view(np.uint8).reshape(-1, 2)
    tensors = _write_raw(tmp_path / "k.gguf", {"w": (raw.reshape(rows, -1), kind)})
    got = dequantize_tensor(tensors["w"])
    assert got.shape == (rows, blocks_per_row * block_elems)
    want = torch_dequantize(torch.from_numpy(raw.reshape(-1).copy()), int(qtype)).numpy().reshape(got.shape)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["Q5_0", "Q5_1", "BF16"])
def test_other_types_roundtrip_within_one_quantisation_step(kind, tmp_path):
    import ml_dtypes

    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    qtype = gguf.GGMLQuantizationType[kind]
    tensors = _write_raw(tmp_path / "q.gguf", {"w": (gguf.quants.quantize(x, qtype), kind)})
    got = dequantize_tensor(tensors["w"])
    if kind == "BF16":
        np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))
        return
    block_max = np.abs(x.reshape(4, 2, 32)).max(-1, keepdims=True)
    err = np.abs(got - x).reshape(4, 2, 32)
    assert (err <= block_max / 15 + 1e-6).all()  # 5-bit codes: steps of at most max|x| / 15 ...
    assert err.max() > 0  # ... and really quantised


def test_llama3_parameters_recovered_from_llama_cpp_factors():
    # Llama 3.2's published rope scaling.
    factors = llama3_freq_factors(500000.0, 64, 32.0, 1.0, 4.0, 8192)
    got = llama3_scaling_from_freq_factors(factors, 500000.0, 64)
    assert got == {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}


def test_llama3_scale_equivalent_parameters_give_the_same_frequencies():
    # (orig, low, high) and (2 orig, 2 low, 2 high) give the same divisors; the recovered set must reproduce them.
    factors = llama3_freq_factors(10000.0, 32, 4.0, 2.0, 6.0, 512)
    params = llama3_scaling_from_freq_factors(factors, 10000.0, 32)
    cfg = ModelConfig(hidden_size=32, num_attention_heads=1, num_key_value_heads=1, head_dim=32, rope_theta=1e4,
                      rope_scaling=tuple(sorted(params.items())))
    base = 1.0 / 10000.0 ** (np.arange(0, 32, 2) / 32)
    np.testing.assert_allclose(np.asarray(rope_inv_freq(cfg)), base / factors, rtol=1e-5)
    assert params["low_freq_factor"] == 1.0 and params["original_max_position_embeddings"] == 256


def test_rope_factors_other_than_llama3():
    assert llama3_scaling_from_freq_factors(np.ones(8), 1e4, 16) is None
    assert llama3_scaling_from_freq_factors(np.full(8, 4.0), 1e4, 16) == {"rope_type": "linear", "factor": 4.0}
    with pytest.raises(ValueError, match="rope_freqs.weight"):
        llama3_scaling_from_freq_factors(np.array([1, 3, 1, 2, 4, 1, 2, 4.0]), 1e4, 16)
    with pytest.raises(ValueError, match="rope_freqs.weight"):
        llama3_scaling_from_freq_factors(np.ones(5), 1e4, 16)


def test_gguf_to_hf_directory_loads_in_both_libraries(hf_models, tmp_path):
    import transformers

    hf = hf_models["llama"]
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf, "llama", "Q8_0")
    out = str(tmp_path / "hf")
    assert main([path, out, "--no-tokenizer"]) == 0
    model, _ = load_gguf(path)
    tokens, mask = padded_batch(hf.config.vocab_size, seed=4)
    np.testing.assert_array_equal(ours(load_pretrained(out), tokens, mask), ours(model, tokens, mask))
    # transformers reads the written directory, llama3 rope parameters included, to the same function.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert masked_max(torch_logits(reloaded, tokens, mask), ours(model, tokens, mask), mask) < 1e-4


# ----------------------------------------------------------------------------------------------------- bad input

def test_unsupported_architecture_named(hf_models, tmp_path):
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf_models["llama"], "llama", arch="gpt2")
    with pytest.raises(ValueError, match=r"architecture 'gpt2'.*supported architectures: llama, qwen2, qwen3"):
        load_gguf(path)


def test_unsupported_quant_type_named(hf_models, tmp_path):
    hf = hf_models["llama"]
    rows, cols = hf.config.intermediate_size, hf.config.hidden_size
    iq4 = np.random.default_rng(0).integers(0, 256, (rows, cols // 32 * 18), dtype=np.uint8)
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf, "llama", override={"blk.0.ffn_up.weight": (iq4, "IQ4_NL")})
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_up\.weight' is stored as IQ4_NL.*Q4_0"):
        load_gguf(path)


@pytest.mark.parametrize("change,message", [
    (dict(meta={"rope.dimension_count": 8}), r"rope\.dimension_count = 8.*partial rotary"),
    (dict(meta={"rope.scaling.type": "yarn"}), r"rope\.scaling\.type = 'yarn'"),
    (dict(meta={"expert_count": 4}), r"expert_count"),
    (dict(meta={"block_count": None}), r"llama\.block_count' is missing"),
    (dict(override={"blk.0.attn_qkv.weight": (np.zeros((4, 4), np.float32), None)}), r"blk\.0\.attn_qkv\.weight"),
    (dict(drop=("blk.1.ffn_down.weight",)), r"model\.layers\.1\.mlp\.down_proj\.weight"),
])
def test_bad_files_named(hf_models, tmp_path, change, message):
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf_models["llama"], "llama", **change)
    with pytest.raises((ValueError, KeyError), match=message):
        load_gguf(path)


def test_not_a_gguf_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_gguf(str(tmp_path / "missing.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(64))
    with pytest.raises(ValueError, match="not a readable GGUF"):
        load_gguf(str(bad))


def test_file_without_tokenizer(hf_models, tmp_path):
    path = write_gguf_from_hf(tmp_path / "m.gguf", hf_models["qwen3"], "qwen3")
    assert not GGUFCheckpoint(path).has_tokenizer
    with pytest.raises(ValueError, match="no tokenizer"):
        load_gguf_tokenizer(path)
    with pytest.raises(ValueError, match="--no-tokenizer"):
        gguf_to_hf(path, str(tmp_path / "out"))


def test_supported_types_listed():
    assert {"F32", "F16", "Q4_0", "Q4_1", "Q8_0"} <= set(SUPPORTED_TENSOR_TYPES)


# ------------------------------------------------------------------------------------- the real SmolLM2 file

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
          "How many clips did Natalia sell altogether in April and May?")


@pytest.fixture(scope="module")
def smol():
    path = str(smollm2_gguf_path())
    ckpt = GGUFCheckpoint(path)  # parsed once for both
    model, config = load_gguf(ckpt)
    tok = load_gguf_tokenizer(ckpt)
    del ckpt
    ids = tok.encode(tok.render_prompt(PROMPT))
    yield dict(path=path, model=model, config=config, tok=tok, ids=ids)
    del model
    gc.collect()


@pytest.fixture(scope="module")
def smol_transformers(smol):
    reference = transformers_gguf_model(smol["path"])
    yield reference
    del reference
    gc.collect()


@pytest.mark.slow
def test_smollm2_config(smol):
    c = smol["model"].config
    assert (c.model_type, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.dim_per_head, c.vocab_size, c.rope_theta, c.tie_word_embeddings, c.attention_bias) == (
        "llama", 30, 576, 9, 3, 64, 49152, 1e5, True, False)
    assert smol["config"]["eos_token_id"] == smol["tok"].eos_id == smol["tok"].token_to_id("<|im_end|>")


@pytest.mark.slow
def test_smollm2_logits_match_transformers(smol, smol_transformers):
    import torch

    ids = np.asarray([smol["ids"]])
    got = ours(smol["model"], ids, np.ones_like(ids))
    reference = smol_transformers
    with torch.no_grad():
        sdpa = reference(input_ids=torch.tensor(ids)).logits.numpy()
        reference.set_attn_implementation("eager")
        try:
            eager = reference(input_ids=torch.tensor(ids)).logits.numpy()
        finally:
            reference.set_attn_implementation("sdpa")
    err = float(np.abs(got - sdpa).max())
    # float32 rounding sets the floor here. SmolLM2's residual stream carries attention-sink activations of ~2.5e4,
    # whose float32 spacing is ~2e-3; the final RMSNorm turns a few such steps into ~1e-4 on logits of ~40. So any
    # change of summation order moves the logits by about 1e-4: transformers' own eager and sdpa attention disagree by
    # 8e-5 on this prompt, and we differ from either by 1.2e-4 to 1.5e-4 (eager or jitted). The bound is 1e-4, or
    # three times that in-library disagreement when it is larger; a mapping or layout error is orders above it.
    noise = float(np.abs(eager - sdpa).max())
    print(f"SmolLM2 logits: ours vs transformers max-abs {err:.2e}; transformers eager vs sdpa {noise:.2e}")
    assert err <= max(1e-4, 3 * noise)
    assert (got.argmax(-1) == sdpa.argmax(-1)).all()


@pytest.mark.slow
def test_smollm2_greedy_continuation_matches_transformers(smol, smol_transformers):
    import torch

    from jaxrl_reason.sampling.sampler import sample

    tok, ids = smol["tok"], smol["ids"]
    with torch.no_grad():
        x = torch.tensor([ids])
        full = smol_transformers.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=32,
                                          pad_token_id=tok.pad_id)
    want = full[0, len(ids):].numpy()
    assert want.shape == (32,)  # the prompt asks for working; 32 tokens come before any end of turn
    out = sample(smol["model"], [ids], jax.random.key(0), max_new_tokens=32, temperature=0.0,
                 stop_token_ids=tok.stop_ids, pad_id=tok.pad_id)
    assert int(out.lengths[0]) == 32
    np.testing.assert_array_equal(out.tokens[0], want)


@pytest.mark.slow
def test_smollm2_tokenizer_saves_as_a_normal_directory(smol, tmp_path):
    from jaxrl_reason.tokenization import Tokenizer

    tok = smol["tok"]
    assert tok.vocab_size == 49152 and tok.has_chat_template
    tok.save_pretrained(tmp_path / "tok")
    again = Tokenizer.from_pretrained(tmp_path / "tok")
    texts = [PROMPT, "def f(x):\n    return x ** 2  # 12345", "Ünïcödé — 数学 ✓"]
    assert again.encode_ragged(texts) == tok.encode_ragged(texts)
    assert again.render_prompt(PROMPT) == tok.render_prompt(PROMPT)
    assert again.stop_ids == tok.stop_ids and tok.eos_id in tok.stop_ids
    assert [tok.decode(ids) for ids in tok.encode_ragged(texts)] == texts


@pytest.mark.slow
def test_smollm2_cli_conversion(smol, tmp_path):
    from jaxrl_reason.tokenization import Tokenizer

    out = str(tmp_path / "smol_hf")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-m", "jaxrl_reason.models.gguf_port", smol["path"], out], check=True, env=env,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(out, "config.json")) as f:
        written = json.load(f)
    assert written["model_type"] == "llama" and written["eos_token_id"] == smol["tok"].eos_id
    ids = np.asarray([smol["ids"][:24]])
    converted = load_pretrained(out)
    np.testing.assert_array_equal(ours(converted, ids, np.ones_like(ids)), ours(smol["model"], ids, np.ones_like(ids)))
    del converted
    assert Tokenizer.from_pretrained(out).encode(PROMPT) == smol["tok"].encode(PROMPT)
