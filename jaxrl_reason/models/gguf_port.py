"""llama.cpp GGUF files -> our decoder (and an HF directory), without torch.

    load_gguf(path)            -> (model, hf_config_dict)     weights dequantised to float32, then cast to `dtype`
    load_gguf_tokenizer(path)  -> Tokenizer                   through transformers' own GGUF tokenizer reader
    gguf_to_hf(path, out_dir)  -> writes config.json + safetensors + generation_config.json + tokenizer files
    python -m jaxrl_reason.models.gguf_port FILE.gguf OUT_DIR [--dtype bfloat16]

A GGUF file is a self-describing container: key/value metadata under llama.cpp's names (`llama.block_count`,
`tokenizer.ggml.tokens`, ...) and tensors under llama.cpp's names (`blk.3.attn_q.weight`), each stored in a ggml
type (F32, F16, or a block quantisation such as Q4_1). The `gguf` package (llama.cpp's own Python reader) parses the
container and dequantises the blocks; this module translates names and metadata to the Hugging Face layout so that
`hf_port.params_from_tensors` builds the model exactly as it does from safetensors.

Two conversions llama.cpp applies when it writes a file are undone here:
- q/k rows of Llama-architecture files are reordered per head, from HF's rotate-half layout (first half of the head
  pairs with the second half) to interleaved pairs (ggml's default rope); `_unpermute_rope_rows` reverses it;
- Llama 3.1-style rope scaling is stored as a per-frequency `rope_freqs.weight` tensor, not as parameters;
  `llama3_scaling_from_freq_factors` recovers parameters that reproduce those factors, and checks that they do.

Quantised files give the model their dequantised weights: the result computes what llama.cpp's file describes, at
float32 precision, not at the (lower) precision of the original unquantised checkpoint.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Any, Dict, Optional, Tuple

import numpy as np

from jaxrl_reason.models.hf_port import config_from_hf, params_from_tensors, save_pretrained
from jaxrl_reason.models.qwen2 import ModelConfig, Qwen2, rope_inv_freq

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")
# Storage types whose dequantisation the tests check against an independent implementation (transformers' torch
# kernels, or a hand-built block); the IQ*/TQ*/FP4 families are left out until they are checked the same way.
SUPPORTED_TENSOR_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                          "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

_HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    **{f"attn_{g}.{kind}": f"self_attn.{h}_proj.{kind}"
       for g, h in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")) for kind in ("weight", "bias")},
    **{f"ffn_{p}.{kind}": f"mlp.{p}_proj.{kind}" for p in ("gate", "up", "down") for kind in ("weight", "bias")},
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")
_ROPE_FREQS = "rope_freqs.weight"


def _gguf_module():
    try:
        import gguf
    except ImportError:
        raise ImportError("reading GGUF files needs the `gguf` package (llama.cpp's reader): pip install gguf") from None
    return gguf


def hf_tensor_name(gguf_name: str) -> Optional[str]:
    """The HF name of a llama.cpp tensor name, or None when it has no counterpart in our decoder."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{int(m.group(1))}.{_BLOCK_NAMES[m.group(2)]}"
    return None


def _unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k reordering. Within each head llama.cpp moves output row i of the first half next
    to row i of the second half ([a0..a{d/2-1}, b0..] -> [a0, b0, a1, b1, ...]); this puts them back.
    `w`: [n_heads * head_dim, ...] (a weight [out, in] or a bias [out])."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_scaling_from_freq_factors(factors: np.ndarray, rope_theta: float, head_dim: int) -> Optional[dict]:
    """HF `rope_parameters` (llama3 or linear type) that reproduce llama.cpp's per-frequency divisors `factors`
    [head_dim // 2]; None when every divisor is 1.

    The llama3 rule depends on (original_max_position_embeddings, low_freq_factor, high_freq_factor) only through
    orig / (high - low) and low / (high - low): each frequency's blend weight s = orig / (wavelen * (high - low))
    - low / (high - low) is affine in 1 / wavelen. So low_freq_factor = 1 loses nothing; the affine map is fitted to
    the frequencies that sit between the bands, and the result is checked against every divisor.
    """
    factors = np.asarray(factors, np.float64).reshape(-1)
    if factors.shape != (head_dim // 2,):
        raise ValueError(f"{_ROPE_FREQS} has {factors.size} entries; expected head_dim / 2 = {head_dim // 2}")
    if not np.all(np.isfinite(factors)) or np.any(factors <= 0):
        raise ValueError(f"{_ROPE_FREQS} holds non-positive or non-finite divisors; the file is corrupt")
    if np.allclose(factors, 1.0, rtol=0, atol=1e-6):
        return None
    factor = float(factors.max())
    if np.allclose(factors, factor, rtol=1e-6, atol=0):
        return {"rope_type": "linear", "factor": factor}
    inv = 1.0 / rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    x = inv / (2 * math.pi)  # 1 / wavelength
    s = (1.0 / factors - 1.0 / factor) / (1.0 - 1.0 / factor)  # 0: divided by `factor`, 1: kept
    tol = 1e-5
    mid = (s > tol) & (s < 1 - tol)
    xs, ss = list(x[mid]), list(s[mid])
    # With fewer than two blended frequencies the line is pinned at the band edges nearest to them.
    low, high = x[s <= tol], x[s >= 1 - tol]
    if len(xs) < 2 and low.size:
        xs.append(float(low.max())), ss.append(0.0)
    if len(xs) < 2 and high.size:
        xs.append(float(high.min())), ss.append(1.0)
    if len(xs) < 2 or np.ptp(xs) == 0:
        raise ValueError(f"{_ROPE_FREQS} divisors do not follow the llama3 rope-scaling rule; not supported")
    slope, intercept = np.polyfit(np.asarray(xs), np.asarray(ss), 1)  # s = slope * x + intercept
    if slope <= 0 or intercept >= 0:
        raise ValueError(f"{_ROPE_FREQS} divisors do not follow the llama3 rope-scaling rule; not supported")
    width = float(-1.0 / intercept)  # high - low, with low = 1
    raw = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 1.0 + width,
           "original_max_position_embeddings": float(slope) * width}
    target = inv / factors
    # Checkpoints use round parameters (8192, 4.0, 32.0); prefer them when they reproduce the divisors as well.
    rounded = dict(raw, factor=round(factor, 4), high_freq_factor=round(1.0 + width, 4),
                   original_max_position_embeddings=int(round(raw["original_max_position_embeddings"])))
    for candidate in (rounded, raw):
        if _rope_matches(candidate, rope_theta, head_dim, target):
            return candidate
    raise ValueError(f"{_ROPE_FREQS} divisors do not follow the llama3 rope-scaling rule (best fit {raw}); "
                     "not supported")


def _rope_matches(params: dict, rope_theta: float, head_dim: int, target: np.ndarray) -> bool:
    # Checked through the model's own frequency code, so what passes here is what the model computes.
    cfg = ModelConfig(vocab_size=1, hidden_size=head_dim, intermediate_size=1, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim, rope_theta=rope_theta,
                      rope_scaling=tuple(sorted(params.items())))
    got = np.asarray(rope_inv_freq(cfg), np.float64)
    return bool(np.all(np.abs(got - target) <= 1e-4 * target))


def _field_value(field) -> Any:
    """A metadata value as Python: str, int/float/bool, or a list of them."""
    gguf = _gguf_module()
    VT = gguf.GGUFValueType
    main = field.types[0]

    def one(part, vtype):
        if vtype == VT.STRING:
            return bytes(part).decode("utf-8")
        v = part[0].item()
        if vtype == VT.FLOAT32:
            # The shortest decimal that is this float32 (1e-05, not 9.999999747378752e-06): what the writer meant.
            return float(str(np.float32(v)))
        return bool(v) if vtype == VT.BOOL else v

    if main == VT.ARRAY:
        sub = field.types[-1]
        if sub == VT.ARRAY:
            raise ValueError(f"GGUF metadata {field.name!r} is a nested array, which is not read")
        return [one(field.parts[i], sub) for i in field.data]
    return one(field.parts[field.data[0]], main)


def dequantize_tensor(tensor) -> np.ndarray:
    """Float32 values of one `gguf.GGUFReader` tensor, in numpy (HF) order: ggml lists dimensions innermost first,
    so a ggml [in, out] weight is [out, in] here."""
    gguf = _gguf_module()
    kind = tensor.tensor_type.name
    if kind not in SUPPORTED_TENSOR_TYPES:
        raise ValueError(f"tensor {tensor.name!r} is stored as {kind}, which is not supported; supported types: "
                         f"{', '.join(SUPPORTED_TENSOR_TYPES)}")
    shape = tuple(int(n) for n in reversed(tensor.shape))
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    if values.size != math.prod(shape):
        raise ValueError(f"tensor {tensor.name!r} ({kind}) decodes to {values.size} values, not {math.prod(shape)} "
                         f"for its shape {shape}")
    return np.asarray(values, np.float32).reshape(shape)


class GGUFCheckpoint:
    """A GGUF file seen as an HF checkpoint: its config as a `config.json` dict, and its tensors under HF names,
    dequantised to float32 (memory-mapped; each tensor is decoded only when asked for)."""

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"GGUF file {path!r} does not exist")
        gguf = _gguf_module()
        self.path = path
        try:
            self.reader = gguf.GGUFReader(path)
        except ValueError as e:
            raise ValueError(f"{path}: not a readable GGUF file ({e})") from None
        self.fields = self.reader.fields
        self.tensors = {t.name: t for t in self.reader.tensors}
        arch = self.meta("general.architecture", None)
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"{path}: GGUF architecture {arch!r} (general.architecture) is not supported; "
                             f"supported architectures: {', '.join(SUPPORTED_ARCHITECTURES)}")
        self.architecture = arch
        bad = sorted((t.name, t.tensor_type.name) for t in self.reader.tensors
                     if t.tensor_type.name not in SUPPORTED_TENSOR_TYPES)
        if bad:
            kinds = sorted({k for _, k in bad})
            raise ValueError(
                f"{path}: tensor {bad[0][0]!r} is stored as {bad[0][1]} ({len(bad)} tensor(s) of type(s) "
                f"{', '.join(kinds)}), which is not supported; supported types: {', '.join(SUPPORTED_TENSOR_TYPES)}. "
                "Re-quantise the original model to one of them (llama.cpp's llama-quantize, e.g. Q4_K_M or Q8_0)")
        unknown = sorted(n for n in self.tensors if n != _ROPE_FREQS and hf_tensor_name(n) is None)
        if unknown:
            raise ValueError(f"{path}: tensor(s) {unknown[:5]} have no counterpart in a {arch} decoder "
                             "(fused, multimodal or extra weights are not supported)")
        self._hf_names = {hf_tensor_name(n): n for n in self.tensors if n != _ROPE_FREQS}
        self._config = self._build_config()

    # ------------------------------------------------------------------------------------------------ metadata
    _REQUIRED = object()

    def meta(self, key: str, default: Any = _REQUIRED) -> Any:
        if key not in self.fields:
            if default is GGUFCheckpoint._REQUIRED:
                raise KeyError(f"{self.path}: GGUF metadata {key!r} is missing")
            return default
        return _field_value(self.fields[key])

    def _arch_meta(self, key: str, default: Any = _REQUIRED, *, per_layer_ok: bool = False) -> Any:
        name = f"{self.architecture}.{key}"
        v = self.meta(name, default)
        if isinstance(v, list):
            # llama.cpp writes some sizes per layer; a uniform list is the plain value.
            if not per_layer_ok or len(set(v)) != 1:
                raise ValueError(f"{self.path}: {name} = {v[:8]}... varies across layers, which is not supported")
            v = v[0]
        return v

    def _build_config(self) -> dict:
        a = self._arch_meta
        path = self.path
        if a("expert_count", 0):
            raise ValueError(f"{path}: {self.architecture}.expert_count = {a('expert_count')} (mixture of experts) "
                             "is not supported")
        hidden = int(a("embedding_length"))
        heads = int(a("attention.head_count", per_layer_ok=True))
        kv_heads = int(a("attention.head_count_kv", heads, per_layer_ok=True))
        head_dim = int(a("attention.key_length", hidden // heads))
        value_dim = int(a("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise ValueError(f"{path}: {self.architecture}.attention.value_length ({value_dim}) differs from "
                             f"attention.key_length ({head_dim}); not supported")
        rot = int(a("rope.dimension_count", head_dim))
        if rot != head_dim:
            raise ValueError(f"{path}: {self.architecture}.rope.dimension_count = {rot} rotates part of each "
                             f"{head_dim}-wide head (partial rotary); not supported")
        embed = self.tensors.get("token_embd.weight")
        if embed is None:
            raise ValueError(f"{path}: tensor 'token_embd.weight' is missing")
        vocab = a("vocab_size", None)
        if vocab is None:
            vocab = int(embed.shape[-1])  # ggml order: [hidden, vocab]
        theta = float(a("rope.freq_base", 10000.0))
        rope: Dict[str, Any] = {"rope_type": "default"}
        scaling_type = a("rope.scaling.type", "none")
        if scaling_type == "linear":
            rope = {"rope_type": "linear", "factor": float(a("rope.scaling.factor"))}
        elif scaling_type not in ("none", None):
            raise ValueError(f"{path}: {self.architecture}.rope.scaling.type = {scaling_type!r} is not supported "
                             "(supported: none, linear, and llama3 factors in rope_freqs.weight)")
        if _ROPE_FREQS in self.tensors:
            if rope["rope_type"] != "default":
                raise ValueError(f"{path}: both rope.scaling.type = {scaling_type!r} and {_ROPE_FREQS} are present")
            rope = llama3_scaling_from_freq_factors(self._dequantize(_ROPE_FREQS), theta, head_dim) or rope
        rope["rope_theta"] = theta

        has = lambda n: n in self.tensors  # noqa: E731
        q_bias, o_bias = has("blk.0.attn_q.bias"), has("blk.0.attn_output.bias")
        if self.architecture == "qwen2" and (not q_bias or o_bias):
            raise ValueError(f"{path}: a qwen2 file has q/k/v biases and no attn_output bias "
                             f"(found blk.0.attn_q.bias: {q_bias}, blk.0.attn_output.bias: {o_bias})")
        if self.architecture != "qwen2" and q_bias != o_bias:
            raise ValueError(f"{path}: blk.0.attn_q.bias present={q_bias} but blk.0.attn_output.bias "
                             f"present={o_bias}; a {self.architecture} model has both or neither (attention_bias)")
        hf = {
            "architectures": [_HF_ARCHITECTURES[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": int(vocab),
            "hidden_size": hidden,
            "intermediate_size": int(a("feed_forward_length", per_layer_ok=True)),
            "num_hidden_layers": int(a("block_count")),
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": head_dim,
            "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")),
            "max_position_embeddings": int(a("context_length", 2048)),
            "tie_word_embeddings": "output.weight" not in self.tensors,
            "hidden_act": "silu",
            "rope_theta": theta,
            "rope_parameters": rope,
            "attention_bias": q_bias,
            "mlp_bias": has("blk.0.ffn_gate.bias"),
            "torch_dtype": "float32",
        }
        for key in ("bos", "eos", "padding"):
            tid = self.meta(f"tokenizer.ggml.{key}_token_id", None)
            if tid is not None:
                hf["pad_token_id" if key == "padding" else f"{key}_token_id"] = int(tid)
        return hf

    def hf_config(self) -> dict:
        """The `config.json` dict of the model in this file."""
        return json.loads(json.dumps(self._config))

    @property
    def has_tokenizer(self) -> bool:
        return "tokenizer.ggml.tokens" in self.fields

    # ------------------------------------------------------------------------------------------------- tensors
    def names(self) -> set:
        """HF names of the model tensors in the file."""
        return set(self._hf_names)

    def _dequantize(self, gguf_name: str) -> np.ndarray:
        try:
            return dequantize_tensor(self.tensors[gguf_name])
        except ValueError as e:
            raise ValueError(f"{self.path}: {e}") from None

    def read(self, gguf_name: str) -> np.ndarray:
        """One tensor by its llama.cpp name, dequantised to float32, as stored (no layout undone)."""
        if gguf_name not in self.tensors:
            raise KeyError(f"{self.path}: no tensor {gguf_name!r}")
        return self._dequantize(gguf_name)

    def get(self, hf_name: str) -> np.ndarray:
        """One tensor by its HF name, float32, in HF layout (llama q/k row order restored)."""
        if hf_name not in self._hf_names:
            raise KeyError(hf_name)
        a = self._dequantize(self._hf_names[hf_name])
        if self.architecture == "llama":
            # Only llama.cpp's Llama converter reorders q/k; its Qwen2/Qwen3 converters keep HF's layout.
            if ".self_attn.q_proj." in hf_name:
                a = _unpermute_rope_rows(a, self._config["num_attention_heads"])
            elif ".self_attn.k_proj." in hf_name:
                a = _unpermute_rope_rows(a, self._config["num_key_value_heads"])
        return a


def _checkpoint(source) -> GGUFCheckpoint:
    # Parsing the metadata of a real file takes seconds (tens of thousands of vocabulary strings): parse it once.
    return source if isinstance(source, GGUFCheckpoint) else GGUFCheckpoint(os.fspath(source))


def load_gguf(path, dtype: str = "float32", *, compute_dtype: Optional[str] = None,
              scan_layers: bool = True, place=None) -> Tuple[Qwen2, dict]:
    """Read a llama.cpp GGUF file (architecture llama, qwen2 or qwen3) as our model.

    path: the .gguf file, or a `GGUFCheckpoint` already opened on it.
    Quantised tensors are dequantised to float32 and stored as `dtype` ("float32" | "bfloat16"); compute_dtype
    defaults to dtype. Returns (model, hf_config) where hf_config is the equivalent `config.json` dict.
    """
    ckpt = _checkpoint(path)
    path = ckpt.path
    hf = ckpt.hf_config()
    cfg = config_from_hf(hf, param_dtype=dtype, dtype=compute_dtype, scan_layers=scan_layers)
    try:
        model = params_from_tensors(cfg, ckpt.get, ckpt.names(), place)
    except (KeyError, ValueError) as e:
        msg = e.args[0] if e.args else str(e)
        raise type(e)(f"{path}: {msg} (HF names; llama.cpp's are blk.N.attn_q.weight, ffn_up.weight, ...)") from None
    return model, hf


def load_gguf_tokenizer(path, **tokenizer_kwargs):
    """The tokenizer stored in a GGUF file (path, or an open `GGUFCheckpoint`), as our `Tokenizer`, built by
    transformers' GGUF tokenizer reader. `tokenizer_kwargs` go to `Tokenizer` (e.g. chat_template_kwargs).

    Note: transformers' GGUF reader imports torch (its GGUF code lives with its torch loaders), so this needs torch
    installed even though nothing runs on it; `load_gguf` does not.
    """
    from transformers import AutoTokenizer

    from jaxrl_reason.tokenization import Tokenizer

    ckpt = _checkpoint(path)
    if not ckpt.has_tokenizer:
        raise ValueError(f"{ckpt.path}: the file holds no tokenizer (no tokenizer.ggml.tokens metadata)")
    folder, name = os.path.split(os.path.abspath(ckpt.path))
    hf = AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    return Tokenizer(hf, **tokenizer_kwargs)


def gguf_to_hf(gguf_path, out_dir: str, *, dtype: str = "float32", tokenizer: bool = True) -> str:
    """Convert a GGUF file into an HF checkpoint directory: config.json, model.safetensors (dequantised, stored as
    `dtype`), generation_config.json and, with `tokenizer`, the tokenizer files. Returns out_dir."""
    ckpt = _checkpoint(gguf_path)
    if tokenizer and not ckpt.has_tokenizer:
        raise ValueError(f"{gguf_path}: the file holds no tokenizer (no tokenizer.ggml.tokens metadata); "
                         "pass tokenizer=False (--no-tokenizer) to write the model alone")
    model, hf = load_gguf(ckpt, "float32")
    gen = {k: hf[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in hf}
    save_pretrained(model, out_dir, dtype=dtype, generation_config=gen or None)
    del model
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        written = json.load(f)
    written.update(gen)  # special token ids: not part of our ModelConfig, but transformers reads them here
    with open(cfg_path, "w") as f:
        json.dump(written, f, indent=2)
    if tokenizer:
        load_gguf_tokenizer(ckpt).save_pretrained(out_dir)
    return out_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxrl_reason.models.gguf_port",
                                description="Convert a llama.cpp GGUF file into a Hugging Face checkpoint directory.")
    p.add_argument("gguf_file")
    p.add_argument("out_dir")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="storage dtype of the written safetensors (weights are dequantised to float32 first)")
    p.add_argument("--no-tokenizer", action="store_true", help="write the model only")
    args = p.parse_args(argv)
    gguf_to_hf(args.gguf_file, args.out_dir, dtype=args.dtype, tokenizer=not args.no_tokenizer)
    print(f"wrote {args.out_dir}: " + ", ".join(sorted(os.listdir(args.out_dir))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
