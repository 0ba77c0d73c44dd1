"""LoRA policies: low-rank adapters on the decoder's projections, the frozen base as the KL reference, and the
adapters written in PEFT's format.

    y = x @ W (+ bias) + (alpha / rank) * x @ A @ B        W frozen; A [in, rank], B [rank, out] trained

The adapters are Flax NNX's own `nnx.LoRA` modules (their A and B are `nnx.LoRAParam`s, which a state filter
separates from the frozen `nnx.Param`s), one per targeted projection, stacked over the layers like every other
parameter, and held in `Linear.lora` (models/qwen2.py). B starts at zero, so the adapted policy starts as the base;
A is drawn like PEFT's default (uniform, bound 1/sqrt(in)). Adapters are float32 whatever the base's storage dtype,
as PEFT keeps them.

- Training: `TRAINABLE` picks the adapters (and a PPO value head or critic, which have no frozen base); the update
  differentiates and keeps optimizer state for those only (`train.update.make_update(trainable=...)`). With
  `dropout` > 0 the update's forward drops the adapters' input features (its `key`); nothing else does.
- Reference: the base with the adapters off is `nnx.merge(base_graphdef(model), base_state(params))`, the same
  arrays as the policy's own frozen weights, so a KL run holds no second copy of the model.
- Sampling: the decode loop merges W + scale * A @ B once per call (`qwen2.decode_layers`); prefill and training
  run the adapter unmerged beside W.
- Export: `hf_port.save_pretrained` writes the merged weights, and `hf_port.save_peft_adapter` the adapters as a
  PEFT directory (`adapter_config.json`, `adapter_model.safetensors`) that `peft.PeftModel.from_pretrained` loads
  onto the base.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np
from flax import nnx

from jaxrl_reason.models.qwen2 import Linear, Qwen2

ATTENTION_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
TARGETS = ATTENTION_TARGETS + MLP_TARGETS

# What a LoRA run trains: the adapters, and the parts that have no frozen base to adapt (PPO's value head, a
# separate critic's whole model).
TRAINABLE = nnx.Any(nnx.LoRAParam, nnx.PathContains("value_head"), nnx.PathContains("critic"))


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters on the policy (the `lora` section of a run). rank 0 trains every weight (no adapters)."""

    rank: int = 0  # adapter rank r (0 = off: full fine-tuning)
    alpha: float = 16.0  # the adapter's output is scaled by alpha / rank (PEFT's lora_alpha)
    # comma-separated projections that get an adapter: any of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
    targets: str = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    # probability of dropping each input feature of an adapter in the update's forward (PEFT's lora_dropout);
    # the sampler, pi_old and the reference are scored without it
    dropout: float = 0.0

    def __post_init__(self):
        if int(self.rank) < 0:
            raise ValueError(f"lora.rank must be >= 0 (0 = no adapters), got {self.rank}")
        if self.rank and self.alpha <= 0:
            raise ValueError(f"lora.alpha must be > 0, got {self.alpha}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"lora.dropout is a probability in [0, 1), got {self.dropout}")
        names = self.target_names
        bad = [t for t in names if t not in TARGETS]
        if bad or (self.rank and not names):
            raise ValueError(f"lora.targets={self.targets!r}: {', '.join(bad) or 'no target'} is not a projection; "
                             f"choose from {','.join(TARGETS)}")

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def target_names(self) -> tuple:
        return tuple(t.strip() for t in self.targets.split(",") if t.strip())

    @property
    def scale(self) -> float:
        return float(self.alpha) / float(self.rank)


def _target_linear(model: Qwen2, name: str) -> Linear:
    return getattr(model.layers.self_attn if name in ATTENTION_TARGETS else model.layers.mlp, name)


def adapted(model: Qwen2) -> dict:
    """{projection name: its Linear} for every projection of `model` that carries an adapter."""
    return {t: lin for t in TARGETS if (lin := _target_linear(model, t)).lora is not None}


def attach_lora(model: Qwen2, cfg: LoraConfig, seed: int = 0) -> Qwen2:
    """Adds `cfg`'s adapters to `model` in place (B = 0: the policy is unchanged) and returns it. A disabled
    config returns the model as it is; a model that already has adapters is refused (one set per policy)."""
    if not cfg.enabled:
        return model
    if adapted(model):
        raise ValueError(f"attach_lora: this model already has adapters on {sorted(adapted(model))}")
    n_layers = model.config.num_hidden_layers
    rngs = nnx.Rngs(params=seed)
    # PEFT's default A: kaiming_uniform(a=sqrt(5)) on [rank, in], i.e. uniform with bound 1/sqrt(in).
    a_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")

    def stacked_lora(d_in, d_out, dtype):  # one adapter per layer, stacked like the layers' own parameters
        @nnx.split_rngs(splits=n_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(r):
            return nnx.LoRA(d_in, cfg.rank, d_out, rngs=r, param_dtype=np.float32, dtype=dtype, a_initializer=a_init)

        return make(rngs)

    for name in cfg.target_names:
        lin = _target_linear(model, name)
        lin.lora = nnx.data(stacked_lora(*lin.kernel.shape[-2:], lin.dtype))
        lin.lora_scale = cfg.scale
        lin.lora_dropout = float(cfg.dropout)
    return model


def lora_config_of(model: Qwen2) -> Optional[LoraConfig]:
    """The LoraConfig `model`'s adapters were attached with (None without adapters)."""
    lins = adapted(model)
    if not lins:
        return None
    first = next(iter(lins.values()))
    rank = first.lora.lora_a.shape[-1]
    return LoraConfig(rank=rank, alpha=first.lora_scale * rank, targets=",".join(lins), dropout=first.lora_dropout)


def base_graphdef(model: Qwen2):
    """The graphdef of `model` with its adapters off: merged with `base_state(params)` it is the base model the
    adapters were attached to, reading the policy's own frozen arrays."""
    lins = adapted(model)
    saved = {t: lin.lora for t, lin in lins.items()}
    try:
        for lin in lins.values():
            lin.lora = None
        return nnx.graphdef(model)
    finally:
        for t, lin in lins.items():
            lin.lora = saved[t]


def base_state(params):
    """`params` (an nnx.State of a LoRA policy) without the adapters: the same arrays, no copy."""
    return nnx.split_state(params, nnx.LoRAParam, ...)[1]


def count_params(params) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


# ------------------------------------------------------------------------------------------------------------
# PEFT's format

ADAPTER_DIR = "adapter"  # the PEFT directory `hf_port.save_pretrained` writes inside a LoRA policy's HF directory
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


def peft_tensors(model: Qwen2) -> dict:
    """The adapters as PEFT names them: lora_A.weight [rank, in] and lora_B.weight [out, rank] per layer and
    projection, float32."""
    out = {}
    for name, lin in adapted(model).items():
        part = "self_attn" if name in ATTENTION_TARGETS else "mlp"
        a = np.asarray(jax.device_get(lin.lora.lora_a[...]), np.float32)  # [layers, in, rank]
        b = np.asarray(jax.device_get(lin.lora.lora_b[...]), np.float32)  # [layers, rank, out]
        for i in range(model.config.num_hidden_layers):
            prefix = f"base_model.model.model.layers.{i}.{part}.{name}"
            out[f"{prefix}.lora_A.weight"] = np.ascontiguousarray(a[i].T)
            out[f"{prefix}.lora_B.weight"] = np.ascontiguousarray(b[i].T)
    return out


def peft_config(model: Qwen2, base_model_name_or_path: str = "") -> dict:
    """adapter_config.json of `model`'s adapters (PEFT's LoraConfig fields; no bias adapters)."""
    cfg = lora_config_of(model)
    if cfg is None:
        raise ValueError("this model has no LoRA adapters (models.lora.attach_lora)")
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model_name_or_path,
            "r": cfg.rank, "lora_alpha": cfg.alpha, "target_modules": sorted(cfg.target_names),
            "lora_dropout": cfg.dropout, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
            "inference_mode": True, "modules_to_save": None}
