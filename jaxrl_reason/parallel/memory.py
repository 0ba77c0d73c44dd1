"""Bytes per device for a model config on a mesh, before anything is allocated.

Exact for what the partition rules decide (parameters and optimizer state are sharded shapes of known arrays,
computed with `jax.eval_shape`, so no memory is touched); an estimate for what XLA decides (gradient buffers,
saved activations of the backward pass, the KV cache of the sampler). The compiled program's
`memory_analysis()` is the ground truth once a device is at hand; this answers "will it fit?" beforehand.

RL alternates sampling and training, so the peak is
    params + reference + optimizer state + max(gradients + activations,  KV cache + sampling logits).
The reference is the frozen copy a KL run keeps of the policy; a LoRA policy (`lora`) reads its own frozen base
instead (no copy), and its optimizer state and gradients are the adapters' only.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Optional, Union

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from jaxrl_reason.parallel.mesh import AXES, BATCH_AXES, resolve_mesh_shape
from jaxrl_reason.parallel.rules import DEFAULT_RULES, Rules, ShardingError, tree_specs

GiB = 1024 ** 3


class BatchSettings(NamedTuple):
    """train_rows: global rows of one update (all tasks packed); train_length: tokens per row;
    micro_batches: gradient-accumulation steps; logprob_chunk: the update's logits chunk (None = whole row);
    sample_rows: global rows decoded at once (prompts x samples); sample_length: prompt + new tokens;
    scored: the update's `scored` (rl.batch.scored_size: the LM head at trained positions only)."""

    train_rows: int
    train_length: int
    sample_rows: int = 0
    sample_length: int = 0
    micro_batches: int = 1
    logprob_chunk: Optional[int] = None
    scored: Optional[int] = None  # the update's LM-head positions per device and micro-batch (None: every position)


class MemoryPlan(NamedTuple):
    mesh: dict
    params: int
    optimizer_state: int
    gradients: int  # the update's gradient buffers and the new params / optimizer state of its guarded step
    activations: int
    kv_cache: int
    sampling_logits: int
    reference: int = 0  # the KL reference's frozen copy of the params (0 without KL, or for a LoRA policy)

    @property
    def peak(self) -> int:
        return self.params + self.reference + self.optimizer_state + max(self.gradients + self.activations,
                                                                         self.kv_cache + self.sampling_logits)

    def fits(self, device_bytes: float, headroom: float = 0.1) -> bool:
        """True if the peak leaves `headroom` (fraction) of the device free for XLA's scratch and fragmentation."""
        return self.peak <= device_bytes * (1.0 - headroom)

    def table(self, device_bytes: Optional[float] = None, headroom: float = 0.1) -> str:
        rows = [("params", self.params), ("KL reference", self.reference), ("optimizer state", self.optimizer_state),
                ("gradients + new state", self.gradients),
                ("activations (train)", self.activations), ("KV cache (sampling)", self.kv_cache),
                ("sampling temporaries", self.sampling_logits), ("peak", self.peak)]
        mesh = ", ".join(f"{k}={v}" for k, v in self.mesh.items())
        lines = [f"per-device memory on mesh ({mesh})", f"{'':22s} {'bytes':>16s} {'GiB':>9s}"]
        lines += [f"{name:22s} {b:16,d} {b / GiB:9.3f}" for name, b in rows]
        if device_bytes is not None:
            verdict = "FITS" if self.fits(device_bytes, headroom) else "DOES NOT FIT"
            lines.append(f"{verdict} in {device_bytes / GiB:.1f} GiB per device (keeping {headroom:.0%} free; "
                         f"peak is {self.peak / device_bytes:.0%} of the device)")
        return "\n".join(lines)


class _Sizes:
    """Stands in for a Mesh where only axis sizes matter: plans for meshes this machine does not have."""

    def __init__(self, sizes: Mapping[str, int]):
        self.shape = dict(sizes)


def _sizes(mesh) -> dict:
    if isinstance(mesh, Mesh):
        return {a: mesh.shape[a] for a in AXES}
    if isinstance(mesh, Mapping) and all(int(v) > 0 for v in mesh.values()):
        return {a: int(mesh.get(a, 1)) for a in AXES}
    raise ValueError("mesh must be a jax Mesh or a dict of positive axis sizes like {'data': 1, 'fsdp': 8, "
                     "'tp': 1} (resolve -1 with mesh.resolve_mesh_shape first)")


def _shard_bytes(abstract_tree, sizes: dict, rules: Rules) -> int:
    specs = tree_specs(abstract_tree, _Sizes(sizes), rules)
    total = 0
    for x, spec in zip(jax.tree.leaves(abstract_tree),
                       jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec))):
        shards = math.prod(math.prod(sizes[a] for a in ((ax,) if isinstance(ax, str) else ax)) if ax else 1
                           for ax in spec)
        total += math.prod(x.shape) * np.dtype(x.dtype).itemsize // shards
    return total


def plan(cfg, mesh: Union[Mesh, Mapping[str, int]], batch: BatchSettings, *, optimizer="adamw",
         rules: Rules = DEFAULT_RULES, lora=None, kl: bool = False) -> MemoryPlan:
    """Per-device bytes for `cfg` (a ModelConfig) on `mesh` (a Mesh, or axis sizes) with `batch` settings.

    lora: a `models.lora.LoraConfig` (None or rank 0: full fine-tuning): the params include the adapters, the
    optimizer state and gradients cover the adapters only, and each adapted projection saves its rank-sized
    x @ A for the backward pass. kl: a KL term reads a reference policy (a frozen copy of the params without LoRA).

    optimizer: an optax GradientTransformation, or "adamw" for the trainer's (global-norm clipping, then AdamW:
    two param-shaped moments and the step counts of Adam and of its schedule).
    Raises ShardingError (naming the tensor) if the mesh cannot hold the model under `rules`.
    """
    from flax import nnx

    from jaxrl_reason.models.qwen2 import as_dtype, init_model
    from jaxrl_reason.parallel.rules import check_model_on_mesh

    sizes = _sizes(mesh)
    check_model_on_mesh(cfg, _Sizes(sizes))
    if optimizer == "adamw":
        optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(optax.constant_schedule(1e-6)))
    from jaxrl_reason.models.lora import TRAINABLE, attach_lora

    use_lora = lora is not None and lora.enabled
    abstract = nnx.state(nnx.eval_shape(lambda: attach_lora(init_model(cfg, 0), lora) if use_lora else
                                        init_model(cfg, 0)))
    trained = nnx.split_state(abstract, TRAINABLE, ...)[0] if use_lora else abstract
    params = _shard_bytes(abstract, sizes, rules)
    trained_bytes = _shard_bytes(trained, sizes, rules)
    opt = _shard_bytes(jax.eval_shape(optimizer.init, trained), sizes, rules)
    # The update keeps a gradient accumulator and the current micro-batch's gradients (both shaped like what it
    # trains), and its guarded step (applied only when every term is finite) computes the new trained params and
    # optimizer state beside the old ones before it selects. Without remat the TPU compiler's update temporaries
    # held 45-70% of such a copy beyond the rest (Qwen2.5-7B on v5p-8, Qwen2.5-Math-1.5B on one chip and on
    # v5e-16; docs/results/tpu_compile.md), XLA:CPU's less: counted as half a copy. With remat see below.
    step_copy = trained_bytes + opt
    grads = 2 * trained_bytes + step_copy // 2
    reference = params if kl and not use_lora else 0

    shards = math.prod(sizes[a] for a in BATCH_AXES)
    tp = sizes["tp"]
    for field, rows in (("train_rows", batch.train_rows), ("sample_rows", batch.sample_rows)):
        if rows % shards:
            raise ShardingError(f"batch/{field}={rows} does not divide over data x fsdp = {shards} batch shards")
    if batch.train_rows % batch.micro_batches:
        raise ShardingError(f"batch/train_rows={batch.train_rows} does not split into micro_batches="
                            f"{batch.micro_batches}")
    act_b = np.dtype(as_dtype(cfg.dtype)).itemsize
    h, d, i, v = cfg.hidden_size, cfg.dim_per_head, cfg.intermediate_size, cfg.vocab_size
    nq, nkv, layers = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers
    t = batch.train_length
    # A micro-batch whose rows do not divide over the shards is padded to the next whole row per shard.
    rows = -(-(batch.train_rows // batch.micro_batches) // shards)
    # Everything a layer's backward pass touches, per token: the residual stream and both norm outputs; q/k/v
    # before and after RoPE and the attention output (split by heads over tp); float32 scores, softmax numerator
    # and probabilities (plus a compute-dtype copy) over t keys; the MLP's gate, up, activation and product.
    full_layer = (act_b * (4 * h + (3 * nq + 3 * nkv) * d // tp + 4 * i // tp)
                  + (8 + act_b) * (nq // tp) * t)
    # What each layer keeps until the backward pass reaches it, by the model's residual policy: all of the above
    # (scan_residuals="all"), the weight matmuls' outputs plus the layer input ("matmuls": q/k/v, o, gate, up,
    # down), or the layer input alone (remat). The last two rebuild one layer's full set during its backward pass.
    if cfg.remat:
        per_token = layers * act_b * h  # one layer's full set is rebuilt in its backward: `rebuilt` below
    elif cfg.scan_residuals == "matmuls" and cfg.scan_layers:
        per_token = layers * act_b * (3 * h + (nq + 2 * nkv) * d // tp + 2 * i // tp) + full_layer
    else:
        per_token = layers * full_layer
    if use_lora:  # each adapted projection's x @ A, kept for the backward pass of B
        per_token += layers * act_b * lora.rank * len(lora.target_names)
    chunk = min(batch.logprob_chunk or t, t)
    # float32 logits, log-softmax and its gradient for one chunk of rows x time (vocab split over tp); with the LM
    # head at the trained positions only (`scored`), at most that many of them.
    head_positions = min(rows * chunk, batch.scored) if batch.scored else rows * chunk
    logits = 3 * 4 * head_positions * v // tp
    untied_fsdp_head = sizes["fsdp"] > 1 and not cfg.tie_word_embeddings and not use_lora
    if untied_fsdp_head:
        # An untied LM head split over fsdp on its input dim: in each micro-batch the TPU compiler forms its whole
        # float32 weight gradient [H, V / tp] on every device and all-reduces it, a buffer of its own that lives
        # through the backward pass over the layers (2.03 GiB for Qwen2.5-7B, the update's largest temporary at
        # 2 and 4 layers on v5e-16; docs/results/tpu_compile.md). A tied embedding's gradient is formed split.
        logits += 4 * h * v // tp
    if not cfg.remat:
        activations = rows * t * per_token + logits
    else:
        # With remat a layer keeps only its input, so the LM head's backward (its logits chunk, an untied fsdp
        # head's weight gradient, and on an fsdp mesh the head's gathered weight, tied or not, alive beside them)
        # is over before the first layer's backward rebuilds a layer's full set: in the TPU compiler's buffer
        # assignment of Qwen2.5-7B's remat update (2 and 4 layers, v5e-16) the two phases' buffers never overlap
        # in time, and the peak is the head's. Without remat the planner keeps their sum, which the compiler's
        # temporaries exceed anyway.
        head = logits + (act_b * h * v // tp if sizes["fsdp"] > 1 else 0)
        rebuilt = rows * t * full_layer
        activations = rows * t * per_token + max(head, rebuilt)
        # The guarded step runs after the micro-batch scan, once the backward's buffers are free (the TPU compiler
        # fuses each select with the update it selects), so its new params and optimizer state at most take their
        # place rather than adding to them: the compiler's remat
        # temporaries grow 3 x a layer's trained bytes a layer (Qwen2.5-7B, 2 -> 4 -> 28 layers), where the two
        # gradient buffers and the layer input are 2 x and 0.5 x of it; with half a copy on top they were 1.26x
        # the compiler's at 28 layers.
        grads = 2 * trained_bytes + max(0, step_copy - activations)

    s_rows = batch.sample_rows // shards if batch.sample_rows else 0
    kv = 2 * layers * s_rows * (nkv // tp) * d * batch.sample_length * act_b + s_rows * batch.sample_length
    sampling_logits = 2 * 4 * s_rows * v // tp  # next-token logits and their log-softmax, float32
    if batch.sample_rows:
        sampling_logits += decode_weight_bytes(cfg, sizes)
    return MemoryPlan(sizes, params, opt, grads, activations, kv, sampling_logits, reference)


def decode_weight_bytes(cfg, mesh) -> int:
    """Per-device bytes of the decode loop's compute-dtype weights (`models.qwen2.decode_layers`), by
    `cfg.decode_weights`. "gathered": every layer whole, split over tp only -- the TPU compiler kept 2.47 GiB of
    temporaries per device for Qwen2.5-Math-1.5B on fsdp=16 (3.26 on one device), 12.32 for Qwen2.5-7B on fsdp=16,
    where the logits alone are 0.01-0.18. "per_layer" on an fsdp mesh: the fused layers split over fsdp x tp, one
    layer whole, and the LM head whole (its gather then sits in the step too): for Qwen2.5-7B on v5e-16 the
    compiler's decode temporaries grew 0.04 GB a layer (a layer split 16 ways is 0.03) from 1.25 GB at two layers
    (the LM head is 1.09), against 0.46 GB a layer gathered (docs/results/tpu_compile.md)."""
    from jaxrl_reason.models.qwen2 import as_dtype
    from jaxrl_reason.parallel.roofline import layer_matmul_params

    sizes = _sizes(mesh)
    act_b = np.dtype(as_dtype(cfg.dtype)).itemsize
    layer = layer_matmul_params(cfg) * act_b // sizes["tp"]
    if cfg.decode_weights == "per_layer" and sizes["fsdp"] > 1:
        head = cfg.vocab_size * cfg.hidden_size * act_b // sizes["tp"]
        return cfg.num_hidden_layers * layer // sizes["fsdp"] + layer + head
    return cfg.num_hidden_layers * layer


def parse_mesh(text: str, num_devices: Optional[int] = None) -> dict:
    """'data=2,fsdp=-1,tp=2' -> {'data': 2, 'fsdp': 2, 'tp': 2} (with num_devices=8)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ValueError(f"mesh entry {part!r} must look like axis=size (axes {AXES})")
        k, val = part.split("=", 1)
        out[k.strip()] = int(val)
    if any(s == -1 for s in out.values()):
        if num_devices is None:
            raise ValueError("a -1 mesh size needs the device count (--devices)")
        out = dict(zip(AXES, resolve_mesh_shape(out, num_devices)))
    elif num_devices is not None:
        out = dict(zip(AXES, resolve_mesh_shape(out, num_devices)))
    else:
        out = dict(zip(AXES, resolve_mesh_shape(out, math.prod(out.values()))))
    return out
