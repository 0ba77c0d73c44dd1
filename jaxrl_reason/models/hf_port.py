"""Hugging Face checkpoints <-> our decoder, without torch.

`load_pretrained(path)` reads `config.json` and one or many `*.safetensors` shards (with their index),
memory-mapped, and builds the model directly from the tensors (no random init first).
`save_pretrained(model, path)` writes a directory that `transformers.AutoModelForCausalLM` loads.

The safetensors format is simple enough to read and write here directly: an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw bytes. Reading it ourselves keeps
bfloat16 (numpy has no bf16; `ml_dtypes` does) and needs neither torch nor a full copy in memory.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from typing import Any, Callable, Dict, Iterable, Optional

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx

from jaxrl_reason.models import lora
from jaxrl_reason.models.qwen2 import ModelConfig, Qwen2, as_dtype

# ----------------------------------------------------------------------------------------------------------
# safetensors I/O

_ST_DTYPES = {
    "F32": np.dtype(np.float32), "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F64": np.dtype(np.float64), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32), "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}


class SafetensorsFile:
    """Lazy, memory-mapped view of one .safetensors file."""

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            try:
                self.header = json.loads(f.read(n))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: corrupt safetensors header ({e})") from None
        self.header.pop("__metadata__", None)
        self._base = 8 + n
        self._mm = None

    def keys(self) -> Iterable[str]:
        return self.header.keys()

    def get(self, name: str) -> np.ndarray:
        info = self.header[name]
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        start, end = info["data_offsets"]
        buf = self._mm[self._base + start:self._base + end]
        return buf.view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])


def write_safetensors(path: str, tensors: Dict[str, np.ndarray], metadata: Optional[dict] = None) -> None:
    header: Dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    arrays = {}
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        if a.dtype not in _ST_NAMES:
            raise ValueError(f"cannot write tensor {name!r} of dtype {a.dtype} to safetensors")
        header[name] = {"dtype": _ST_NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        arrays[name] = a
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep tensor data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(arrays):
            f.write(arrays[name].tobytes())


class CheckpointTensors:
    """All tensors of a (possibly sharded) checkpoint directory, looked up by name."""

    def __init__(self, path: str):
        index = os.path.join(path, "model.safetensors.index.json")
        files: Dict[str, SafetensorsFile] = {}
        self.where: Dict[str, SafetensorsFile] = {}
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            for name, fname in weight_map.items():
                fp = os.path.join(path, fname)
                if fname not in files:
                    if not os.path.exists(fp):
                        raise FileNotFoundError(
                            f"{index} lists shard {fname!r} (for tensor {name!r}) but {fp} does not exist")
                    files[fname] = SafetensorsFile(fp)
                self.where[name] = files[fname]
        else:
            shards = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
            if not shards:
                raise FileNotFoundError(
                    f"no *.safetensors weights in {path} (expected model.safetensors or a sharded index); "
                    "PyTorch .bin checkpoints are not read: convert them with transformers' save_pretrained")
            for fname in shards:
                sf = SafetensorsFile(os.path.join(path, fname))
                for name in sf.keys():
                    self.where[name] = sf

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return set(self.where)

    def get(self, name: str) -> np.ndarray:
        if name not in self.where:
            raise KeyError(name)
        return self.where[name].get(name)


# ----------------------------------------------------------------------------------------------------------
# config.json <-> ModelConfig

SUPPORTED_MODEL_TYPES = ("qwen2", "qwen3", "llama")
# Fields that only matter for training-time dropout, caching, or init, and have no effect on the forward.
_IGNORED = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache", "initializer_range",
    "attention_dropout", "bos_token_id", "eos_token_id", "pad_token_id", "max_window_layers", "layer_types",
    "sliding_window", "use_sliding_window", "hidden_act", "rope_theta", "rope_scaling", "rope_parameters",
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
    "attention_bias", "mlp_bias", "pretraining_tp", "output_attentions", "output_hidden_states", "return_dict",
    "name_or_path", "_name_or_path", "id2label", "label2id", "problem_type", "tokenizer_class", "prefix",
    "is_encoder_decoder", "tie_encoder_decoder", "chunk_size_feed_forward", "add_cross_attention",
    "task_specific_params", "finetuning_task", "quantization_config", "use_mrope", "_attn_implementation",
}


def config_from_hf(hf: dict, *, param_dtype="float32", dtype=None, scan_layers=True) -> ModelConfig:
    """Translate an HF `config.json` dict; anything we cannot compute faithfully raises, naming the field."""
    model_type = hf.get("model_type")
    archs = hf.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"config.json: model_type {model_type!r} (architectures {archs}) is not supported; "
                         f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act={hf['hidden_act']!r} is not supported (only 'silu')")
    if hf.get("use_sliding_window", False):
        raise ValueError("config.json: use_sliding_window=true is not supported (sliding-window attention); "
                         "set it to false if the context never exceeds the window")
    layer_types = hf.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise ValueError(f"config.json: layer_types {sorted(set(layer_types))} include non-full attention, "
                         "which is not supported")
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise ValueError("config.json: pretraining_tp != 1 is not supported")
    if hf.get("quantization_config"):
        raise ValueError("config.json: quantization_config is set; quantised HF checkpoints are not supported")
    if hf.get("use_mrope"):
        raise ValueError("config.json: use_mrope=true (multimodal RoPE) is not supported")

    rope = dict(hf.get("rope_parameters") or {})
    legacy_scaling = hf.get("rope_scaling")
    if legacy_scaling:
        rope.update(legacy_scaling)
    theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    scaling = None
    if rope_type not in (None, "default"):
        keep = {k: v for k, v in rope.items() if k != "rope_theta"}
        keep["rope_type"] = rope_type
        keep.pop("type", None)
        scaling = tuple(sorted(keep.items()))

    qwen3 = model_type == "qwen3"
    default_bias = model_type == "qwen2"
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_hidden_layers=int(hf["num_hidden_layers"]),
        num_attention_heads=int(hf["num_attention_heads"]),
        num_key_value_heads=int(hf.get("num_key_value_heads") or hf["num_attention_heads"]),
        head_dim=hf.get("head_dim"),
        rope_theta=float(theta),
        rope_scaling=scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        # Qwen2 always has q/k/v bias (no config field); Qwen3 and Llama follow `attention_bias` (o_proj too).
        attention_bias=bool(hf.get("attention_bias", default_bias)) if model_type != "qwen2" else True,
        o_proj_bias=bool(hf.get("attention_bias", False)) if model_type != "qwen2" else False,
        mlp_bias=bool(hf.get("mlp_bias", False)),
        qk_norm=qwen3,
        model_type=model_type,
        param_dtype=param_dtype,
        dtype=dtype or param_dtype,
        scan_layers=scan_layers,
    )


def config_to_hf(cfg: ModelConfig, dtype_name: str) -> dict:
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[cfg.model_type]
    rope = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
    if cfg.rope_scaling is not None:
        rope.update(dict(cfg.rope_scaling))
    out = {
        "architectures": [arch], "model_type": cfg.model_type, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.dim_per_head,
        "rms_norm_eps": cfg.rms_norm_eps, "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
        "rope_parameters": rope, "rope_theta": cfg.rope_theta, "use_sliding_window": False,
        "torch_dtype": dtype_name, "use_cache": True,
    }
    if cfg.rope_scaling is not None:
        out["rope_scaling"] = dict(cfg.rope_scaling)
    if cfg.model_type != "qwen2":
        out["attention_bias"] = cfg.attention_bias
        out["mlp_bias"] = cfg.mlp_bias
    elif cfg.o_proj_bias or cfg.mlp_bias or not cfg.attention_bias:
        raise ValueError("a qwen2 checkpoint always has q/k/v bias and no o_proj/mlp bias; "
                         "use model_type='llama' for other bias layouts")
    return out


# ----------------------------------------------------------------------------------------------------------
# tensor name mapping

def _layer_entries(cfg: ModelConfig):
    """(our path inside `layers`, HF suffix, transpose) for every per-layer tensor."""
    e = [(("input_layernorm", "weight"), "input_layernorm.weight", False),
         (("post_attention_layernorm", "weight"), "post_attention_layernorm.weight", False)]
    for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
        e.append((("self_attn", p, "kernel"), f"self_attn.{p}.weight", True))
    if cfg.attention_bias:
        e += [(("self_attn", p, "bias"), f"self_attn.{p}.bias", False) for p in ("q_proj", "k_proj", "v_proj")]
    if cfg.o_proj_bias:
        e.append((("self_attn", "o_proj", "bias"), "self_attn.o_proj.bias", False))
    if cfg.qk_norm:
        e += [(("self_attn", "q_norm", "weight"), "self_attn.q_norm.weight", False),
              (("self_attn", "k_norm", "weight"), "self_attn.k_norm.weight", False)]
    for p in ("gate_proj", "up_proj", "down_proj"):
        e.append((("mlp", p, "kernel"), f"mlp.{p}.weight", True))
        if cfg.mlp_bias:
            e.append((("mlp", p, "bias"), f"mlp.{p}.bias", False))
    return e


def _get_path(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _abstract_model(cfg: ModelConfig):
    return nnx.eval_shape(lambda: Qwen2(cfg, rngs=nnx.Rngs(params=0)))


def hf_tensor_names(cfg: ModelConfig) -> set:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg.tie_word_embeddings:
        names.add("lm_head.weight")
    for i in range(cfg.num_hidden_layers):
        names |= {f"model.layers.{i}.{suffix}" for _, suffix, _ in _layer_entries(cfg)}
    return names


def params_from_tensors(cfg: ModelConfig, get: Callable[[str], np.ndarray], names: set,
                        place: Optional[Callable[[tuple, np.ndarray], jax.Array]] = None,
                        value_head: Optional[Dict[str, np.ndarray]] = None) -> Qwen2:
    """Build a model from HF-named tensors. `place(path, array)` puts each assembled parameter on device(s)
    (the sharded loader passes one that device_puts straight into its sharding). With `cfg.value_head`, the value
    head is `value_head` ({"kernel": [H, 1], "bias": [1]}, as `save_pretrained(value_head="separate")` writes
    it) or zeros; it is one small matrix, left on the default device for the trainer to lay out."""
    pd = as_dtype(cfg.param_dtype)
    abstract = _abstract_model(cfg)
    graphdef, state = nnx.split(abstract)
    expected = hf_tensor_names(cfg)
    missing = sorted(expected - names)
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise KeyError(f"checkpoint is missing tensor(s) {missing[:5]}{more} needed by a {cfg.model_type} model")
    ignorable = {n for n in names if n.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings:
        ignorable.add("lm_head.weight")
    unexpected = sorted(names - expected - ignorable)
    if unexpected:
        raise KeyError(f"checkpoint has tensor(s) this {cfg.model_type} config does not use: {unexpected[:5]} "
                       "(check config.json: attention_bias / mlp_bias / tie_word_embeddings / model_type)")
    place = place or (lambda path, a: jnp.asarray(a))

    def fetch(name, shape, transpose):
        a = get(name)
        a = a.T if transpose else a
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"tensor {name!r} has shape {tuple(get(name).shape)}; expected "
                             f"{tuple(shape[::-1]) if transpose else tuple(shape)} from config.json")
        return np.asarray(a, dtype=pd)

    pure = nnx.to_pure_dict(state)
    out = jax.tree.map(lambda x: None, pure)
    out["embed_tokens"]["weight"] = place(("embed_tokens", "weight"), fetch(
        "model.embed_tokens.weight", pure["embed_tokens"]["weight"].shape, False))
    out["norm"]["weight"] = place(("norm", "weight"), fetch("model.norm.weight", pure["norm"]["weight"].shape, False))
    if not cfg.tie_word_embeddings:
        out["lm_head"]["kernel"] = place(("lm_head", "kernel"), fetch(
            "lm_head.weight", pure["lm_head"]["kernel"].shape, True))
    for path, suffix, transpose in _layer_entries(cfg):
        shape = _get_path(pure["layers"], path).shape[1:]
        stacked = np.empty((cfg.num_hidden_layers, *shape), pd)
        for i in range(cfg.num_hidden_layers):
            stacked[i] = fetch(f"model.layers.{i}.{suffix}", shape, transpose)
        parent = _get_path(out["layers"], path[:-1])
        parent[path[-1]] = place(("layers",) + path, stacked)
    if cfg.value_head:
        for name in ("kernel", "bias"):
            shape = pure["value_head"][name].shape
            a = np.zeros(shape, pd) if value_head is None else np.asarray(value_head[name], pd)
            if a.shape != tuple(shape):
                raise ValueError(f"value head {name} has shape {a.shape}; expected {tuple(shape)}")
            out["value_head"][name] = jnp.asarray(a)
    nnx.replace_by_pure_dict(state, out)
    return nnx.merge(graphdef, state)


def load_pretrained(path: str, dtype: str = "float32", *, compute_dtype: Optional[str] = None,
                    scan_layers: bool = True, place=None, value_head: bool = False) -> Qwen2:
    """Load an HF Qwen2/Qwen2.5/Qwen3/Llama directory (config.json + safetensors) as our model.

    dtype: parameter storage dtype ("float32" | "bfloat16"); compute_dtype defaults to it.
    value_head: build PPO's value head too, from the directory's `value_head.npz` when there is one (see
    `save_pretrained`), else zero-initialised. A directory's value_head.npz is ignored without it.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"checkpoint directory {path!r} does not exist")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.exists(cfg_path):
        raise FileNotFoundError(f"{cfg_path} is missing: a Hugging Face checkpoint directory needs config.json")
    with open(cfg_path) as f:
        hf = json.load(f)
    cfg = config_from_hf(hf, param_dtype=dtype, dtype=compute_dtype, scan_layers=scan_layers)
    tensors = CheckpointTensors(path)
    head = None
    if value_head:
        cfg = cfg.replace(value_head=True)
        head_path = os.path.join(path, VALUE_HEAD_FILE)
        if os.path.exists(head_path):
            with np.load(head_path) as f:
                head = {k: f[k] for k in ("kernel", "bias")}
    return params_from_tensors(cfg, tensors.get, tensors.names(), place, value_head=head)


def model_tensors(model: Qwen2, dtype=None) -> Dict[str, np.ndarray]:
    """HF-named numpy tensors of `model` (kernels transposed back to [out, in]); never the value head, which is
    no tensor of the HF architecture (see `save_pretrained`)."""
    cfg = model.config
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    cast = (lambda a: np.asarray(jax.device_get(a)).astype(dtype)) if dtype is not None else (
        lambda a: np.asarray(jax.device_get(a)))
    out = {"model.embed_tokens.weight": cast(pure["embed_tokens"]["weight"]),
           "model.norm.weight": cast(pure["norm"]["weight"])}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = cast(pure["lm_head"]["kernel"]).T
    for path, suffix, transpose in _layer_entries(cfg):
        if path[-1] == "kernel":  # a LoRA policy's projections are written merged: W + scale * A @ B
            stacked = cast(getattr(getattr(model.layers, path[0]), path[1]).merged_kernel())
        else:
            stacked = cast(_get_path(pure["layers"], path))
        for i in range(cfg.num_hidden_layers):
            out[f"model.layers.{i}.{suffix}"] = stacked[i].T if transpose else stacked[i]
    return out


# PPO's value head, outside the HF weights: `transformers` would refuse (or warn about) a tensor Qwen2ForCausalLM
# does not have, and our loader reads every *.safetensors of an unindexed directory, hence .npz.
VALUE_HEAD_FILE = "value_head.npz"
VALUE_HEAD_EXPORT = ("drop", "separate")
CRITIC_DIR = "critic"  # a separate critic's own HF directory inside the policy's


def save_pretrained(model: Qwen2, path: str, *, dtype: Optional[str] = None,
                    max_shard_bytes: int = 4 << 30, generation_config: Optional[dict] = None,
                    value_head: str = "drop", adapter_base: str = "") -> None:
    """Write `model` as an HF directory (config.json + safetensors, sharded with an index when large).

    A LoRA policy (`models.lora.attach_lora`) is written merged, and its adapters alone beside the weights as a
    PEFT directory `<path>/adapter` whose `base_model_name_or_path` is `adapter_base` (the base model's directory
    or hub name); a stale adapter directory is removed when the model has none.

    value_head (a model with PPO's critic): "drop" leaves it out -- the directory is the plain causal LM, and a
    stale value_head.npz or critic/ there is removed; "separate" also writes it: a shared head as
    `value_head.npz` (float32 kernel [H, 1] and bias [1]), which `load_pretrained(path, value_head=True)` reads
    back; a separate critic model (`attach_critic`) as its own HF directory `critic/` with its head's
    value_head.npz, read back by `load_pretrained(path + "/critic", value_head=True)`."""
    if value_head not in VALUE_HEAD_EXPORT:
        raise ValueError(f"save_pretrained value_head={value_head!r}; choose one of {VALUE_HEAD_EXPORT}")
    critic = getattr(model, "critic", None)
    has_head = getattr(model, "value_head", None) is not None
    if value_head == "separate" and not has_head and critic is None:
        raise ValueError("save_pretrained value_head='separate': this model has no value head or critic to export")
    critic_dir = os.path.join(path, CRITIC_DIR)
    if os.path.isdir(critic_dir) and os.path.exists(os.path.join(critic_dir, VALUE_HEAD_FILE)):
        shutil.rmtree(critic_dir)  # ours (an HF directory with a value head): stale whatever is saved now
    if critic is not None and value_head == "separate":
        save_pretrained(critic, critic_dir, dtype=dtype, max_shard_bytes=max_shard_bytes, value_head="separate")
    cfg = model.config
    dtype_name = dtype or cfg.param_dtype
    tensors = model_tensors(model, np.dtype(as_dtype(dtype_name)))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config_to_hf(cfg, dtype_name), f, indent=2)
    if generation_config:
        with open(os.path.join(path, "generation_config.json"), "w") as f:
            json.dump(generation_config, f, indent=2)
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        nbytes = tensors[name].nbytes
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += nbytes
    shards.append(current)
    for old in os.listdir(path):  # a stale shard from an earlier save would be read as extra tensors
        if old.endswith(".safetensors") or old in ("model.safetensors.index.json", VALUE_HEAD_FILE):
            os.remove(os.path.join(path, old))
    if value_head == "separate" and has_head:
        pure = nnx.to_pure_dict(nnx.state(model.value_head, nnx.Param))
        np.savez(os.path.join(path, VALUE_HEAD_FILE),
                 **{k: np.asarray(jax.device_get(pure[k]), np.float32) for k in ("kernel", "bias")})
    adapter_dir = os.path.join(path, lora.ADAPTER_DIR)
    if os.path.exists(os.path.join(adapter_dir, lora.ADAPTER_CONFIG)):
        shutil.rmtree(adapter_dir)
    if lora.adapted(model):
        save_peft_adapter(model, adapter_dir, adapter_base)
    if len(shards) == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), shards[0])
        return
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(path, fname), shard)
        weight_map.update({n: fname for n in shard})
    total = sum(t.nbytes for t in tensors.values())
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def save_peft_adapter(model: Qwen2, path: str, base_model_name_or_path: str = "") -> None:
    """Writes a LoRA policy's adapters as a PEFT directory (adapter_config.json, adapter_model.safetensors):
    `peft.PeftModel.from_pretrained(base, path)` on the HF base model gives the adapted policy's logits."""
    config = lora.peft_config(model, base_model_name_or_path)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, lora.ADAPTER_CONFIG), "w") as f:
        json.dump(config, f, indent=2)
    write_safetensors(os.path.join(path, lora.ADAPTER_WEIGHTS), lora.peft_tensors(model))
