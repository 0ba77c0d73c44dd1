"""One decoder for Qwen2, Qwen2.5 and Qwen3 (and Llama-style checkpoints), in Flax NNX.

    tokens ─ embed ─┬─ [ RMSNorm ─ GQA attention (RoPE, optional q/k-norm) ─ + ─ RMSNorm ─ SwiGLU MLP ─ + ] x L
                    └──────────────────────────────────────────────────────────────────────────────────────
                 ─ RMSNorm ─ lm_head (or the tied embedding) ─ logits

The L decoder layers are stored *stacked* (every parameter has a leading [layers] axis) and run under
`lax.scan` in training, so compile time does not grow with depth; `scan_layers=False` unrolls the same
parameters. Decoding with a KV cache always unrolls (per-layer cache buffers update in place).

Attention works in two modes with one code path:
- training / scoring: `model(tokens, positions, segment_ids)` — causal attention inside each segment
  (segment 0 is padding), so packed rows and left- or right-padding all work;
- sampling: `model(tokens, positions, segment_ids, cache=cache)` writes the new keys/values into the
  cache at `cache.index` and attends to every valid cache slot at or before the query's own slot;
- shared prompts: `model.shared_prefix_hidden_states(...)` runs prompts once and the rows that continue them
  as one flat token stream (`SharedPrefix` says which row reads which prompt's keys/values).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}

DECODE_WEIGHTS = ("gathered", "per_layer")  # ModelConfig.decode_weights

# The mesh axes that split batch rows (`parallel.mesh.BATCH_AXES`; restated, since models sit below parallel).
_ROW_AXES = ("data", "fsdp")


def split_rows(x: jax.Array) -> jax.Array:
    """Pins an activation's leading (row) axis to the row-splitting axes of the mesh the caller traces under
    (`jax.set_mesh`, as `train.update.make_sharded_update` does); a no-op with no mesh or a one-device one.
    Without it XLA may all-gather rows to meet an fsdp-sharded weight on its contracted axis, so every device
    would compute every row (the compiled update did, before this pin)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    axes = tuple(a for a in _ROW_AXES if a in mesh.axis_names and mesh.shape[a] > 1)
    if not axes:
        return x
    return jax.lax.with_sharding_constraint(x, jax.sharding.PartitionSpec(axes, *([None] * (x.ndim - 1))))


def as_dtype(name_or_dtype) -> Any:
    if isinstance(name_or_dtype, str):
        if name_or_dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name_or_dtype!r}")
        return DTYPES[name_or_dtype]
    return jnp.dtype(name_or_dtype)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Qwen2 / Qwen2.5 / Qwen3 / Llama decoder (field names follow HF `config.json`)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: Optional[int] = None  # None: hidden_size // num_attention_heads
    rope_theta: float = 1e6
    # None or a dict like HF's `rope_scaling` ({"rope_type": "llama3", "factor": 8, ...}); "default" = none.
    rope_scaling: Optional[tuple] = None
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    attention_bias: bool = True  # q/k/v biases: Qwen2/2.5 yes, Qwen3/Llama no
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    model_type: str = "qwen2"
    param_dtype: str = "float32"  # storage dtype of the weights
    dtype: str = "float32"  # compute dtype of activations and matmuls
    scan_layers: bool = True  # lax.scan over the stacked layers (flat compile time in depth)
    # Rematerialise each layer in the backward pass (jax.checkpoint on the scanned body): only the residual
    # stream between layers is saved, not the attention/MLP intermediates -- activation memory drops by roughly
    # the ratio of those to the hidden size, for about one extra forward pass of compute. Not a checkpoint field.
    remat: bool = False
    # Without remat, what the scanned layers keep for the backward pass: "matmuls" keeps the outputs of the weight
    # matmuls and recomputes the elementwise ops and attention products from them -- the per-layer stacks XLA
    # must zero-fill and write shrink (bench/train_step.py's peak RSS: 2.1 -> 1.6 GB) at about the same update
    # time on CPU; "all" keeps whatever XLA saves by default. Not a checkpoint field.
    scan_residuals: str = "matmuls"
    # PPO's learned value: a scalar head (hidden -> 1, zero-initialised) on the final-norm hidden state, in the
    # param tree only when True, so a model without it is unchanged. Not an HF field: `hf_port.save_pretrained`
    # drops it unless asked to export it as its own file.
    value_head: bool = False
    # How the sampler's decode loop runs LoRA adapters (models/lora.py): "merged" adds scale * A @ B into the
    # kernels once per decode call, "unmerged" computes x @ A @ B beside them at every token. Merged measured
    # faster (docs/results/lora.md). Not a checkpoint field.
    lora_decode: str = "merged"
    # How the sampler's decode loop gathers its compute-dtype layer weights (`decode_layers`) on an fsdp mesh:
    # "gathered" leaves it to the compiler, which (TPU) gathers every layer inside each step and, nothing ordering
    # the gathers, holds all of them whole at once (12.3 GiB a chip for a 7B in bf16, which fsdp does not divide);
    # "per_layer" orders them, each layer's gather after the previous layer's input, so about one layer is whole
    # at a time. Both move every layer every step; same tokens either way. Not a checkpoint field.
    decode_weights: str = "gathered"

    def __post_init__(self):
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads"):
            if int(getattr(self, f)) <= 0:
                raise ValueError(f"ModelConfig.{f} must be positive, got {getattr(self, f)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"ModelConfig.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("ModelConfig.head_dim must be set when hidden_size is not divisible by num_attention_heads")
        if self.head_dim is not None and self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
        as_dtype(self.param_dtype), as_dtype(self.dtype)
        if self.lora_decode not in ("merged", "unmerged"):
            raise ValueError(f"ModelConfig.lora_decode must be 'merged' or 'unmerged', got {self.lora_decode!r}")
        if self.decode_weights not in DECODE_WEIGHTS:
            raise ValueError(f"ModelConfig.decode_weights must be one of {DECODE_WEIGHTS}, got "
                             f"{self.decode_weights!r}")
        if self.scan_residuals not in ("matmuls", "all"):
            raise ValueError(f"ModelConfig.scan_residuals must be 'matmuls' or 'all', got {self.scan_residuals!r}")
        if self.remat and not self.scan_layers:
            raise ValueError("ModelConfig.remat=True rematerialises the scanned layers; set scan_layers=True")
        if self.rope_scaling is not None:
            rs = dict(self.rope_scaling)
            kind = rs.get("rope_type", rs.get("type", "default"))
            if kind not in ("default", "llama3", "linear"):
                raise ValueError(
                    f"ModelConfig.rope_scaling type {kind!r} is not supported (supported: default, linear, llama3)")

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    def num_params(self) -> int:
        h, d, i = self.hidden_size, self.dim_per_head, self.intermediate_size
        nq, nkv = self.num_attention_heads, self.num_key_value_heads
        attn = h * d * (nq + 2 * nkv) + nq * d * h + (d * (nq + 2 * nkv) if self.attention_bias else 0)
        layer = attn + 3 * h * i + 2 * h + (2 * d if self.qk_norm else 0)
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        value = h + 1 if self.value_head else 0
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head + value


class KVCache(NamedTuple):
    """Keys/values of every layer for `slots` positions; slot order is time order.

    k:     one array per layer, [batch, kv_heads, head_dim, slots] — keys stored transposed, so attention
           scores are a plain (non-transposed) batched matmul, several times faster on CPU than the alternative
    v:     one array per layer, [batch, kv_heads, slots, head_dim]
    valid: [batch, slots] bool — the slot holds a real (non-padding) token
    index: [] int32 — the next slot to write (all rows write the same slot; rows differ by position ids)

    Per-layer arrays (not one stacked [layers, ...] array) let XLA update each in place inside the decode loop;
    slicing a stacked cache per layer costs a full copy per step.
    """

    k: tuple
    v: tuple
    valid: jax.Array
    index: jax.Array

    @staticmethod
    def zeros(cfg: ModelConfig, batch: int, slots: int, dtype=None) -> "KVCache":
        dtype = as_dtype(dtype or cfg.dtype)
        nkv, d, n = cfg.num_key_value_heads, cfg.dim_per_head, cfg.num_hidden_layers
        return KVCache(tuple(jnp.zeros((batch, nkv, d, slots), dtype) for _ in range(n)),
                       tuple(jnp.zeros((batch, nkv, slots, d), dtype) for _ in range(n)),
                       jnp.zeros((batch, slots), bool), jnp.zeros((), jnp.int32))

    def grow(self, slots: int) -> "KVCache":
        """The same cache with `slots` more (empty, invalid) slots at the end."""
        pad = lambda a, axis: jnp.pad(a, [(0, slots if i == axis else 0) for i in range(a.ndim)])  # noqa: E731
        return KVCache(tuple(pad(k, 3) for k in self.k), tuple(pad(v, 2) for v in self.v), pad(self.valid, 1),
                       self.index)

    def repeat(self, n: int) -> "KVCache":
        """Each row repeated n times (row-major): the shared prefill of n samples of one prompt."""
        rep = lambda a: jnp.repeat(a, n, axis=0)
        return KVCache(tuple(map(rep, self.k)), tuple(map(rep, self.v)), rep(self.valid), self.index)


# ----------------------------------------------------------------------------------------------------------
# Building blocks


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, *, param_dtype, dtype):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps
        self.dtype = dtype

    def __call__(self, x):
        return rms_norm(x, self.weight[...], self.eps, self.dtype)


def rms_norm(x, weight, eps: float, dtype):
    """RMSNorm over the last axis. Normalises in float32 like the reference implementation, then casts back
    before the scale."""
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return weight.astype(dtype) * xf.astype(dtype)


LORA_DROPOUT_MASK = "lora_dropout_mask"  # the name the adapters' dropout masks are saved under for the backward


def _split_key(key, n: int) -> tuple:
    """n keys from `key` (n Nones without one: the forward without dropout)."""
    return (None,) * n if key is None else tuple(jax.random.split(key, n))


def dense(x: jax.Array, w: jax.Array, **dot_kw) -> jax.Array:
    """x [..., d_in] @ w [d_in, d_out] as one 2-D matmul over the flattened leading axes.

    Same math as `x @ w`, but its gradient is two plain 2-D matmuls: for a [batch, time, d_in] input JAX
    transposes the 3-D dot into dot_generals that contract over (batch, time) at once, which XLA:CPU ran
    2.3x slower (213 vs 91 ms for one [64, 80, 256] x [256, 1024] layer's backward, 2 cores)."""
    lead = x.shape[:-1]
    y = jax.lax.dot_general(x.reshape(-1, x.shape[-1]), w, (((1,), (0,)), ((), ())), **dot_kw)
    return y.reshape(*lead, w.shape[-1])


class Linear(nnx.Module):
    """y = x @ kernel (+ bias) (+ lora_scale * x @ A @ B); kernel is [in, out] (HF stores the transpose).

    `lora` is None, or an `nnx.LoRA` adapter attached by `models.lora.attach_lora` (its A and B are `nnx.LoRAParam`s,
    the only parameters a LoRA run trains). The adapter runs unmerged, beside the frozen kernel, so the backward
    pass never forms a full-size weight gradient."""

    def __init__(self, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs, param_dtype, dtype, std=0.02):
        self.kernel = nnx.Param(std * jax.random.normal(rngs.params(), (d_in, d_out), param_dtype))
        self.bias = nnx.Param(jnp.zeros((d_out,), param_dtype)) if bias else None
        self.dtype = dtype
        self.lora = None
        self.lora_scale = 0.0
        self.lora_dropout = 0.0  # probability of zeroing an input feature of the adapter (training forward only)

    def adapter(self, x, dropout_key=None):
        """lora_scale * x @ A @ B in the compute dtype (None without an adapter), from the `nnx.LoRA`'s A and B.

        x @ A is a plain 2-D matmul, as in `dense`; (x @ A) @ B carries a unit batch dimension, which the scanned
        layers' "matmuls" residual policy (it saves the outputs of dots without batch dims) does not save: the
        rank-sized x @ A is kept and the out-sized product recomputed from it in the backward pass. Saved, it
        doubled every adapted projection's residuals (the CPU default's update: 127 -> 202 MB of temporaries).

        dropout_key: given and `lora_dropout` > 0, the adapter's input features are dropped (inverted dropout, as
        PEFT's `lora_dropout` on x before A); the frozen path x @ W never is. None: no dropout."""
        if self.lora is None:
            return None
        lead = x.shape[:-1]
        a = self.lora.lora_a[...].astype(self.dtype)
        b = (self.lora_scale * self.lora.lora_b[...]).astype(self.dtype)
        x = x.astype(self.dtype)
        if dropout_key is not None and self.lora_dropout > 0:
            # 16-bit draws: half the threefry work of `bernoulli`'s 32-bit uniforms (the masks' RNG, not the
            # adapter's matmuls, is what dropout costs on a CPU). The drop probability is p rounded to 1/65536,
            # and the kept features are scaled by the inverse of that exact keep rate (unbiased).
            cut = round(self.lora_dropout * 65536)
            # kept for the backward pass (`_scan_layers`' residual policy) rather than drawn again there
            keep = checkpoint_name(jax.random.bits(dropout_key, x.shape, jnp.uint16) >= cut, LORA_DROPOUT_MASK)
            x = jnp.where(keep, x * jnp.asarray(65536 / (65536 - cut), x.dtype), jnp.zeros((), x.dtype))
        h = dense(x, a)
        y = jax.lax.dot_general(h.reshape(1, -1, h.shape[-1]), b[None], (((2,), (1,)), ((0,), (0,))))
        return y.reshape(*lead, b.shape[-1])

    def merged_kernel(self):
        """kernel + lora_scale * A @ B (the kernel itself without an adapter), in the storage dtype; works on the
        stacked [layers, in, out] kernels too."""
        w = self.kernel[...]
        if self.lora is None:
            return w
        a, b = self.lora.lora_a[...], self.lora.lora_b[...]
        delta = jnp.einsum("...ir,...ro->...io", a.astype(jnp.float32), b.astype(jnp.float32))
        return (w.astype(jnp.float32) + self.lora_scale * delta).astype(w.dtype)

    def __call__(self, x, dropout_key=None):
        y = dense(x.astype(self.dtype), self.kernel[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        if self.lora is not None:
            y = y + self.adapter(x, dropout_key)
        return y


def rope_inv_freq(cfg: ModelConfig) -> jax.Array:
    d = cfg.dim_per_head
    inv_freq = 1.0 / (cfg.rope_theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    if cfg.rope_scaling is None:
        return inv_freq
    rs = dict(cfg.rope_scaling)
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        return inv_freq / float(rs["factor"])
    if kind == "llama3":
        # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the band between interpolated.
        factor, lo, hi = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        orig = float(rs["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (orig / wavelen - lo) / (hi - lo)
        interp = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        out = jnp.where(wavelen > orig / lo, inv_freq / factor, inv_freq)
        mid = (wavelen <= orig / lo) & (wavelen >= orig / hi)
        return jnp.where(mid, interp, out)
    return inv_freq


class Rope(NamedTuple):
    """cos and sin of the rotary angles, [batch, time, 1, head_dim / 2] each.

    Made once per forward pass (`rope_tables`), before the layers: computed inside each layer, XLA fuses the cos
    and sin into the rotation of every head and every layer, forward and rematerialised backward (the rotations of
    one update at 4k tokens took 75 ms that way and 41 ms from tables, 2 cores, `bench/profile_update.py --ops`)."""

    cos: jax.Array
    sin: jax.Array


def rope_tables(positions: jax.Array, inv_freq: jax.Array) -> Rope:
    """positions [batch, time] -> `Rope` tables."""
    angles = positions.astype(jnp.float32)[..., None, None] * inv_freq  # [B, T, 1, D/2]
    return Rope(jnp.cos(angles), jnp.sin(angles))


def apply_rope(x: jax.Array, rope: Rope) -> jax.Array:
    """x: [batch, time, heads, head_dim]. Rotate-half convention (HF)."""
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * rope.cos - x2 * rope.sin, x2 * rope.cos + x1 * rope.sin], axis=-1)
    return out.astype(x.dtype)


def attend(q, k, v, mask, dtype):
    """Grouped-query attention core, shared by the forward pass and the single-token decode step.

    q [B, KVH, G*T, D] (query head kv*G + j at row j*T + t), k [B, KVH, D, S] (keys transposed), v [B, KVH, S, D],
    mask [B, T, S] bool. Returns [B, KVH, G*T, D]. A query with no visible key gets a uniform softmax (finite
    fill value), not NaN.
    """
    b, nkv, gt, d = q.shape
    t = mask.shape[1]
    scores = jnp.einsum("bkqd,bkds->bkqs", q, k.astype(dtype), preferred_element_type=jnp.float32)
    scores = scores.reshape(b, nkv, gt // t, t, -1) / math.sqrt(d)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype).reshape(b, nkv, gt, -1)
    return jnp.einsum("bkqs,bksd->bkqd", probs, v.astype(dtype))


class SharedPrefix(NamedTuple):
    """Attention layout of a flat token stream in which prompts shared by several rows are stored once.

    The stream holds `prefixes x prefix_time` prompt tokens, then `rows x suffix_time` continuation tokens; row r's
    continuation attends to prefix row `index[r]` (all of it that is valid) and causally to itself. A GRPO group's
    G samples share one prompt, so its prompt tokens go through every matmul once instead of G times.

    index:       int32 [rows]
    prefix_mask: bool  [prefixes, prefix_time, prefix_time]   causal, valid keys only
    suffix_mask: bool  [rows, suffix_time, prefix_time + suffix_time]   the prefix's valid keys, then causal
    """

    index: jax.Array
    prefix_mask: jax.Array
    suffix_mask: jax.Array

    @property
    def shapes(self) -> tuple[int, int, int, int]:
        """(prefixes, prefix_time, rows, suffix_time), static."""
        p, lp, _ = self.prefix_mask.shape
        r, ls, _ = self.suffix_mask.shape
        return p, lp, r, ls


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pd, dt = as_dtype(cfg.param_dtype), as_dtype(cfg.dtype)
        h, d = cfg.hidden_size, cfg.dim_per_head
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, d
        kw = dict(rngs=rngs, param_dtype=pd, dtype=dt)
        self.q_proj = Linear(h, self.num_heads * d, bias=cfg.attention_bias, **kw)
        self.k_proj = Linear(h, self.num_kv_heads * d, bias=cfg.attention_bias, **kw)
        self.v_proj = Linear(h, self.num_kv_heads * d, bias=cfg.attention_bias, **kw)
        self.o_proj = Linear(self.num_heads * d, h, bias=cfg.o_proj_bias, **kw)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, param_dtype=pd, dtype=dt)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, param_dtype=pd, dtype=dt)
        else:
            self.q_norm = self.k_norm = None
        self.dtype = dt

    def __call__(self, x, rope: Rope, mask, kv: Optional[tuple] = None, index=None,
                 prefix: Optional[SharedPrefix] = None, dropout_key=None):
        """x [B,T,H]; rope: tables for x's positions; mask [B,T,S] bool. With `kv=(k_cache [B,KVH,D,S],
        v_cache [B,KVH,S,D])` the new keys and values are written at slots index..index+T-1 and attention runs over
        all S slots; returns (out, (k, v)). With `prefix`, x is one flat stream [1, N, H] laid out as
        `SharedPrefix` says (`mask` is unused). dropout_key: the LoRA adapters' dropout (`Linear.adapter`)."""
        b, t, _ = x.shape
        keys = _split_key(dropout_key, 4)
        nkv, d = self.num_kv_heads, self.head_dim
        # One [H, (heads + 2 kv) * D] matmul instead of three: fewer, larger GEMMs forward and backward.
        projs = (self.q_proj, self.k_proj, self.v_proj)
        qkv = dense(x.astype(self.dtype), jnp.concatenate([p.kernel[...].astype(self.dtype) for p in projs], axis=1))
        if self.q_proj.bias is not None:
            qkv = qkv + jnp.concatenate([p.bias[...].astype(self.dtype) for p in projs])
        if any(p.lora is not None for p in projs):  # LoRA: the adapters' outputs, in the fused layout
            x2 = x.astype(self.dtype)
            qkv = qkv + jnp.concatenate([p.adapter(x2, k) if p.lora is not None else
                                         jnp.zeros((*x.shape[:-1], p.kernel.shape[-1]), self.dtype)
                                         for p, k in zip(projs, keys)], axis=-1)
        q, k, v = jnp.split(qkv, [self.num_heads * d, (self.num_heads + nkv) * d], axis=-1)
        q, k, v = q.reshape(b, t, self.num_heads, d), k.reshape(b, t, nkv, d), v.reshape(b, t, nkv, d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        if prefix is not None:
            return self.o_proj(self._attend_shared_prefix(q, k, v, prefix), keys[3]), None
        q, k, v = self._to_heads(q, k, v)
        if kv is not None:
            k_cache, v_cache = kv
            k = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, 0, 0, index))
            v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, 0, index, 0))
        out = self.o_proj(self._from_heads(attend(q, k, v, mask, self.dtype)), keys[3])
        return out, ((k, v) if kv is not None else None)

    def _to_heads(self, q, k, v):
        """[B,T,heads,D] projections -> the layouts `attend` takes: q [B,KVH,G*T,D], k [B,KVH,D,T], v [B,KVH,T,D].
        Query head h = kv_head * g + j uses key/value head kv_head (HF's repeat_kv order)."""
        b, t, nkv, d = k.shape
        g = self.num_heads // nkv
        q = q.reshape(b, t, nkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, nkv, g * t, d)
        return q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)

    def _from_heads(self, out):
        """attend's [B,KVH,G*T,D] -> [B,T,heads*D]."""
        b, nkv, gt, d = out.shape
        g = self.num_heads // nkv
        return out.reshape(b, nkv, g, gt // g, d).transpose(0, 3, 1, 2, 4).reshape(b, gt // g, self.num_heads * d)

    def _attend_shared_prefix(self, q, k, v, prefix: SharedPrefix):
        """q/k/v [1, N, heads, D] of the flat stream -> attention output [1, N, heads*D]. Each continuation row
        reads its prefix's keys/values through a gather, so the gradient of a shared prompt sums over its rows."""
        p, lp, r, ls = prefix.shapes
        n_p = p * lp

        def split(a):
            a = a[0]
            return a[:n_p].reshape(p, lp, *a.shape[1:]), a[n_p:].reshape(r, ls, *a.shape[1:])

        (qp, qs), (kp, ks), (vp, vs) = split(q), split(k), split(v)
        qp, kp, vp = self._to_heads(qp, kp, vp)
        qs, ks, vs = self._to_heads(qs, ks, vs)
        out_p = self._from_heads(attend(qp, kp, vp, prefix.prefix_mask, self.dtype))
        ks = jnp.concatenate([kp[prefix.index], ks], axis=-1)  # [R, KVH, D, Lp + Ls]
        vs = jnp.concatenate([vp[prefix.index], vs], axis=-2)  # [R, KVH, Lp + Ls, D]
        out_s = self._from_heads(attend(qs, ks, vs, prefix.suffix_mask, self.dtype))
        return jnp.concatenate([out_p.reshape(n_p, -1), out_s.reshape(r * ls, -1)])[None]


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        kw = dict(bias=cfg.mlp_bias, rngs=rngs, param_dtype=as_dtype(cfg.param_dtype), dtype=as_dtype(cfg.dtype))
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, **kw)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, **kw)

    def __call__(self, x, dropout_key=None):
        kg, ku, kd = _split_key(dropout_key, 3)
        return self.down_proj(jax.nn.silu(self.gate_proj(x, kg)) * self.up_proj(x, ku), kd)


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        pd, dt = as_dtype(cfg.param_dtype), as_dtype(cfg.dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, dtype=dt)
        self.self_attn = Attention(cfg, rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, dtype=dt)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x, rope: Rope, mask, kv=None, index=None, prefix: Optional[SharedPrefix] = None,
                 dropout_key=None):
        k_attn, k_mlp = _split_key(dropout_key, 2)
        h, kv = self.self_attn(self.input_layernorm(x), rope, mask, kv, index, prefix, k_attn)
        x = split_rows(x + h)
        x = split_rows(x + self.mlp(self.post_attention_layernorm(x), k_mlp))
        return x, kv


class Embed(nnx.Module):
    def __init__(self, vocab: int, dim: int, *, rngs: nnx.Rngs, param_dtype, dtype):
        self.weight = nnx.Param(0.02 * jax.random.normal(rngs.params(), (vocab, dim), param_dtype))
        self.dtype = dtype

    def __call__(self, tokens):
        return jnp.take(self.weight[...], tokens, axis=0).astype(self.dtype)

    def attend(self, x):
        return jnp.dot(x, self.weight[...].astype(self.dtype).T)


# ----------------------------------------------------------------------------------------------------------
# The model


class Qwen2(nnx.Module):
    """Decoder-only LM. `__call__` returns float32 logits [batch, time, vocab] (and the updated cache)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        pd, dt = as_dtype(cfg.param_dtype), as_dtype(cfg.dtype)
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs, param_dtype=pd, dtype=dt)

        # Stacked layers: one DecoderLayer whose every parameter carries a leading [layers] axis.
        @nnx.split_rngs(splits=cfg.num_hidden_layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make_layers(r):
            return DecoderLayer(cfg, r)

        self.layers = make_layers(rngs)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pd, dtype=dt)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False, rngs=rngs, param_dtype=pd, dtype=dt)
        # Built last and drawing no random numbers, so every other parameter is the same with or without it.
        self.value_head = ValueHead(cfg.hidden_size, param_dtype=pd) if cfg.value_head else None
        # PPO's separate critic (`attach_critic`): a second Qwen2 with a value head, in the same param tree so it
        # is trained, checkpointed and sharded with the policy; the LM path never reads it.
        self.critic = None

    def hidden_states(self, tokens, positions, segment_ids=None, cache: Optional[KVCache] = None,
                      layer_params: Optional[list] = None, dropout_key=None):
        """Final-norm hidden states [B,T,H] (and the updated cache). See the module docstring for the modes.
        dropout_key: a training forward's key for the LoRA adapters' dropout (`Linear.adapter`); None: none."""
        cfg = self.config
        chex.assert_rank([tokens, positions], 2)
        b, t = tokens.shape
        if segment_ids is None:
            segment_ids = jnp.ones((b, t), jnp.int32)
        live = segment_ids != 0
        if cache is None:
            causal = jnp.tril(jnp.ones((t, t), bool))
            same = segment_ids[:, :, None] == segment_ids[:, None, :]
            mask = causal[None] & same & live[:, None, :]
        else:
            slots = cache.valid.shape[1]
            valid = jax.lax.dynamic_update_slice_in_dim(cache.valid, live, cache.index, axis=1)
            q_slot = cache.index + jnp.arange(t)
            mask = (jnp.arange(slots)[None, :] <= q_slot[:, None])[None] & valid[:, None, :]
        # A padding query has no visible key; the finite fill value keeps its softmax uniform, not NaN.
        x = split_rows(self.embed_tokens(tokens))
        rope = rope_tables(positions, rope_inv_freq(cfg))
        graphdef = nnx.graphdef(self.layers)

        def run_layer(x, params, kv, key):
            layer = nnx.merge(graphdef, params)
            return layer(x, rope, mask, kv, None if cache is None else cache.index, dropout_key=key)

        if cache is None and cfg.scan_layers:
            apply = lambda layer, x, k: layer(x, rope, mask, dropout_key=k)[0]  # noqa: E731
            return self._scan_layers(x, apply, dropout_key), None
        # Unrolled: always with a cache (see KVCache), or when asked for. `layer_params` lets a decode loop
        # slice the stacked weights once, outside the loop, instead of once per step.
        if layer_params is None:
            layer_params = self.unstack_layers()
        ks, vs = [], []
        layer_keys = _split_key(dropout_key, cfg.num_hidden_layers)
        for i in range(cfg.num_hidden_layers):
            x, kv = run_layer(x, layer_params[i], None if cache is None else (cache.k[i], cache.v[i]), layer_keys[i])
            if kv is not None:
                ks.append(kv[0]), vs.append(kv[1])
        new_cache = None if cache is None else KVCache(tuple(ks), tuple(vs), valid, cache.index + t)
        return self.norm(x), new_cache

    def _scan_layers(self, x, apply, dropout_key=None):
        """x through the stacked layers under `lax.scan`; apply(layer, x, key) -> x runs one layer, key the
        layer's dropout key (one per layer from `dropout_key`; None without)."""
        cfg = self.config
        graphdef, layer_state = nnx.split(self.layers)
        keys = None if dropout_key is None else jax.random.split(dropout_key, cfg.num_hidden_layers)
        body = lambda x, pk: (apply(nnx.merge(graphdef, pk[0]), x, pk[1]), None)  # noqa: E731
        if cfg.remat:
            body = jax.checkpoint(body)
        elif cfg.scan_residuals == "matmuls":
            policies = jax.checkpoint_policies
            body = jax.checkpoint(body, policy=policies.save_from_both_policies(
                policies.dots_with_no_batch_dims_saveable, policies.save_only_these_names(LORA_DROPOUT_MASK)))
        x, _ = jax.lax.scan(body, x, (layer_state, keys))
        return self.norm(x)

    def shared_prefix_hidden_states(self, prefix_tokens, prefix_positions, prefix_valid, index,
                                    suffix_tokens, suffix_positions, suffix_valid, dropout_key=None):
        """Final-norm hidden states of rows that continue shared prompts, each prompt computed once.

        prefix_*: [P, Lp] right-padded prompts (valid: bool, True on real tokens); suffix_*: [R, Ls] the rows'
        continuations (valid False on padding), row r continuing prefix `index[r]` (int32 [R]). Positions are
        absolute (a suffix starts where its prefix ends). Returns (h_prefix [P, Lp, H], h_suffix [R, Ls, H]): the
        same hidden states as `hidden_states` over each row's full sequence, with P x Lp + R x Ls tokens through
        the matmuls instead of R x (Lp + Ls). Every token of the flat stream goes through one set of GEMMs.
        dropout_key: as in `hidden_states`."""
        chex.assert_rank([prefix_tokens, prefix_positions, prefix_valid, suffix_tokens, suffix_positions,
                          suffix_valid], 2)
        chex.assert_equal_shape([prefix_tokens, prefix_positions, prefix_valid])
        chex.assert_equal_shape([suffix_tokens, suffix_positions, suffix_valid])
        p, lp = prefix_tokens.shape
        r, ls = suffix_tokens.shape
        chex.assert_shape(index, (r,))
        causal_p = jnp.tril(jnp.ones((lp, lp), bool))
        causal_s = jnp.tril(jnp.ones((ls, ls), bool))
        layout = SharedPrefix(
            index=index,
            prefix_mask=causal_p[None] & prefix_valid[:, None, :],
            suffix_mask=jnp.concatenate([jnp.broadcast_to(prefix_valid[index][:, None, :], (r, ls, lp)),
                                         causal_s[None] & suffix_valid[:, None, :]], axis=-1))

        def flat(a, b):  # [P, Lp, ...] and [R, Ls, ...] -> [1, P*Lp + R*Ls, ...]
            return jnp.concatenate([a.reshape(-1, *a.shape[2:]), b.reshape(-1, *b.shape[2:])])[None]

        x = flat(self.embed_tokens(prefix_tokens), self.embed_tokens(suffix_tokens))
        positions = flat(prefix_positions, suffix_positions)
        rope = rope_tables(positions, rope_inv_freq(self.config))
        apply = lambda layer, x, k: layer(x, rope, None, prefix=layout, dropout_key=k)[0]  # noqa: E731
        if self.config.scan_layers:
            h = self._scan_layers(x, apply, dropout_key)
        else:
            layer_keys = _split_key(dropout_key, self.config.num_hidden_layers)
            for params, k in zip(self.unstack_layers(), layer_keys):
                x = apply(nnx.merge(nnx.graphdef(self.layers), params), x, k)
            h = self.norm(x)
        h = h[0]
        return h[:p * lp].reshape(p, lp, -1), h[p * lp:].reshape(r, ls, -1)

    def unstack_layers(self) -> list:
        """Per-layer parameter states sliced from the stacked layers."""
        layer_state = nnx.state(self.layers)
        return [jax.tree.map(lambda a: a[i], layer_state) for i in range(self.config.num_hidden_layers)]

    def values_from_hidden(self, h) -> jax.Array:
        """float32 [...] per-position values V from final-norm hidden states [..., H] (the PPO critic)."""
        if self.value_head is None:
            raise ValueError("this model has no value head; build it with ModelConfig(value_head=True) or "
                             "models.qwen2.attach_value_head(model)")
        return self.value_head(h)

    @property
    def value_source(self) -> Optional[str]:
        """Where PPO's values come from: "head" (a head on this trunk), "separate" (`self.critic`'s own trunk),
        or None (no critic)."""
        if self.critic is not None:
            return "separate"
        return "head" if self.value_head is not None else None

    def logits_from_hidden(self, h):
        if self.lm_head is None:
            return self.embed_tokens.attend(h).astype(jnp.float32)
        return self.lm_head(h).astype(jnp.float32)

    def __call__(self, tokens, positions, segment_ids=None, cache: Optional[KVCache] = None,
                 layer_params: Optional[list] = None):
        h, new_cache = self.hidden_states(tokens, positions, segment_ids, cache, layer_params)
        logits = self.logits_from_hidden(h)
        return logits if cache is None else (logits, new_cache)


class ValueHead(nnx.Module):
    """V = h . kernel + bias, zero-initialised (V = 0 before training: the first step's advantages are the rewards
    themselves, no random baseline), computed in float32 whatever the compute dtype (a regression on returns)."""

    def __init__(self, dim: int, *, param_dtype):
        self.kernel = nnx.Param(jnp.zeros((dim, 1), param_dtype))
        self.bias = nnx.Param(jnp.zeros((1,), param_dtype))

    def __call__(self, h):
        v = dense(h.astype(jnp.float32), self.kernel[...].astype(jnp.float32))
        return (v + self.bias[...].astype(jnp.float32))[..., 0]


def attach_value_head(model: Qwen2) -> Qwen2:
    """Adds a zero value head to `model` in place (config.value_head=True) and returns it; a model that has one
    is returned as it is. In place, so every holder of the module (a pipeline evaluating or saving it) sees the
    same structure as the trainer's params."""
    if model.value_head is None:
        model.config = dataclasses.replace(model.config, value_head=True)
        # nnx.data: the attribute was None (static) when the model was built without a head.
        head = ValueHead(model.config.hidden_size, param_dtype=as_dtype(model.config.param_dtype))
        model.value_head = nnx.data(head)
    return model


CRITIC_INITS = ("policy", "random")


def attach_critic(model: Qwen2, *, init: str = "policy", seed: int = 0) -> Qwen2:
    """Adds PPO's separate critic to `model` in place and returns it: a Qwen2 of the policy's architecture with a
    zero value head, as `model.critic`, trained only by the value loss. init="policy" starts its trunk from the
    policy's current weights (verl's and TRL's usual setup: critic and actor loaded from the same checkpoint),
    "random" from a fresh draw of `seed`. A model that already has a critic is returned as it is; one with a
    shared value head is refused (one critic per policy)."""
    if init not in CRITIC_INITS:
        raise ValueError(f"attach_critic init={init!r}; choose one of {CRITIC_INITS}")
    if model.critic is not None:
        return model
    if model.value_head is not None:
        raise ValueError("attach_critic: this model already has a shared value head (ModelConfig.value_head); a "
                         "policy gets one critic -- build it without the head, or use the head")
    critic = Qwen2(dataclasses.replace(model.config, value_head=True), rngs=nnx.Rngs(seed))
    if init == "policy":
        # Copy every trunk parameter (the value head stays zero): nnx.state(model) has no critic yet.
        own = nnx.state(model, nnx.Param)
        nnx.update(critic, jax.tree.map(jnp.copy, own))
    model.critic = nnx.data(critic)
    return model


def init_model(cfg: ModelConfig, seed: int = 0) -> Qwen2:
    return Qwen2(cfg, rngs=nnx.Rngs(params=seed))


def positions_from_mask(mask: jax.Array) -> jax.Array:
    """Position ids for a [B,T] 0/1 mask of real tokens: 0,1,2,... over real tokens (left padding gets 0)."""
    return jnp.maximum(jnp.cumsum(mask.astype(jnp.int32), axis=-1) - 1, 0)


# ----------------------------------------------------------------------------------------------------------
# Single-token decoding
#
# A decode step does a few small matmuls per layer on [batch, hidden] rows, so on CPU its cost is mostly the
# number of operations and passes over memory, not arithmetic. The step below computes exactly what
# `Qwen2.__call__` with a cache computes for T = 1 (same helpers, same operation order), on weights laid out
# once per decode call: q/k/v in one matmul and gate/up in one matmul.


class DecodeLayer(NamedTuple):
    """One layer's weights for single-token steps, in the compute dtype.

    qkv:      [H, KVH, G + 2, D] — for each kv head its G query heads, then its key, then its value. One matmul
              yields q already grouped the way `attend` wants it, and a tensor-parallel split over kv heads stays
              local to each shard.
    qkv_bias: [KVH, G + 2, D] or None
    gate_up:  [H, 2, I] — gate then up
    Norm weights are [H] (q_norm / k_norm [D], Qwen3 only); biases are None where the config has none.
    """

    input_norm: jax.Array
    qkv: jax.Array
    qkv_bias: Optional[jax.Array]
    q_norm: Optional[jax.Array]
    k_norm: Optional[jax.Array]
    o: jax.Array
    o_bias: Optional[jax.Array]
    post_norm: jax.Array
    gate_up: jax.Array
    gate_up_bias: Optional[jax.Array]
    down: jax.Array
    down_bias: Optional[jax.Array]
    # LoRA adapters run beside the weights (ModelConfig.lora_decode="unmerged"): {projection: (A [in, r],
    # scale * B [r, out])}; None when merged into them or absent.
    adapters: Optional[dict] = None


# The fused decode weights' split over the mesh: the stacked kernels' layout (parallel/rules.py: the model input
# dim over fsdp, heads and the MLP width over tp), restated for the fused shapes since models sit below parallel.
_DECODE_WEIGHT_AXES = {"qkv": ("fsdp", "tp", None, None), "o": ("tp", "fsdp"), "gate_up": ("fsdp", None, "tp"),
                       "down": ("tp", "fsdp")}


def _decode_pin(layer: "DecodeLayer", keep_fsdp: bool) -> "DecodeLayer":
    """The layer's big weights pinned to the mesh the caller traces under: split over fsdp (keep_fsdp) or whole
    over fsdp, split over tp either way."""
    mesh = jax.sharding.get_abstract_mesh()
    pinned = {}
    for name, axes in _DECODE_WEIGHT_AXES.items():
        spec = [a if a in mesh.axis_names and (keep_fsdp or a != "fsdp") else None for a in axes]
        pinned[name] = jax.lax.with_sharding_constraint(getattr(layer, name), jax.sharding.PartitionSpec(*spec))
    return layer._replace(**pinned)


def gathers_per_layer(cfg: ModelConfig) -> bool:
    """True when `decode_step` gathers each layer's weights inside the step (`ModelConfig.decode_weights` =
    "per_layer" traced under a mesh whose fsdp axis splits them); False: `decode_layers` holds them whole."""
    mesh = jax.sharding.get_abstract_mesh()
    return (cfg.decode_weights == "per_layer" and not mesh.empty and "fsdp" in mesh.axis_names
            and mesh.shape["fsdp"] > 1)


def decode_layers(model: Qwen2) -> tuple:
    """Per-layer `DecodeLayer`s sliced from the stacked parameters. Call it once per decode call, outside the
    step loop: slicing stacked weights inside the loop would copy them every step. Under
    `decode_weights="per_layer"` on an fsdp mesh they stay split over fsdp (`decode_step` gathers each in turn)."""
    out = _decode_layers(model)
    if gathers_per_layer(model.config):
        out = tuple(_decode_pin(w, keep_fsdp=True) for w in out)
    return out


def _decode_layers(model: Qwen2) -> tuple:
    cfg = model.config
    dt = as_dtype(cfg.dtype)
    h, d, nkv = cfg.hidden_size, cfg.dim_per_head, cfg.num_key_value_heads
    g = cfg.num_attention_heads // nkv
    attn, mlp = model.layers.self_attn, model.layers.mlp

    def val(p, i):
        return None if p is None else p[...][i]

    def fuse_qkv(q, k, v, lead):  # [*lead, heads * D] each -> [*lead, KVH, G + 2, D]
        q, k, v = q.reshape(*lead, nkv, g, d), k.reshape(*lead, nkv, 1, d), v.reshape(*lead, nkv, 1, d)
        return jnp.concatenate([q, k, v], axis=-2).astype(dt)

    def bias_of(linear, i):
        return None if linear.bias is None else val(linear.bias, i)

    # LoRA adapters are merged into the kernels here, once per decode call (`Linear.merged_kernel`; the stacked
    # kernels as they are without adapters): a decode step then costs what the base model's does.
    projs = (("q", attn.q_proj), ("k", attn.k_proj), ("v", attn.v_proj), ("o", attn.o_proj),
             ("gate", mlp.gate_proj), ("up", mlp.up_proj), ("down", mlp.down_proj))
    merge = cfg.lora_decode == "merged"
    kern = {name: lin.merged_kernel() if merge else lin.kernel[...] for name, lin in projs}
    beside = {} if merge else {name: lin for name, lin in projs if lin.lora is not None}
    out = []
    for i in range(cfg.num_hidden_layers):
        qkv_bias = None
        if attn.q_proj.bias is not None:
            qkv_bias = fuse_qkv(val(attn.q_proj.bias, i), val(attn.k_proj.bias, i), val(attn.v_proj.bias, i), ())
        gate_up_bias = None
        if mlp.gate_proj.bias is not None:
            gate_up_bias = jnp.stack([val(mlp.gate_proj.bias, i), val(mlp.up_proj.bias, i)]).astype(dt)
        as_dt = lambda a: None if a is None else a.astype(dt)
        out.append(DecodeLayer(
            input_norm=val(model.layers.input_layernorm.weight, i),
            qkv=fuse_qkv(kern["q"][i], kern["k"][i], kern["v"][i], (h,)),
            qkv_bias=qkv_bias,
            q_norm=None if attn.q_norm is None else val(attn.q_norm.weight, i),
            k_norm=None if attn.k_norm is None else val(attn.k_norm.weight, i),
            o=as_dt(kern["o"][i]), o_bias=as_dt(bias_of(attn.o_proj, i)),
            post_norm=val(model.layers.post_attention_layernorm.weight, i),
            gate_up=jnp.stack([kern["gate"][i], kern["up"][i]], axis=1).astype(dt),
            gate_up_bias=gate_up_bias,
            down=as_dt(kern["down"][i]), down_bias=as_dt(bias_of(mlp.down_proj, i)),
            adapters={name: (lin.lora.lora_a[...][i].astype(dt), (lin.lora_scale * lin.lora.lora_b[...][i]).astype(dt))
                      for name, lin in beside.items()} or None))
    return tuple(out)


def decode_step(model: Qwen2, layers: Sequence[DecodeLayer], tokens: jax.Array, positions: jax.Array,
                live: jax.Array, cache: KVCache, window: Optional[int] = None):
    """One token per row: tokens, positions [B] int32, live [B] bool (a finished row's slot is marked invalid).
    Writes slot `cache.index` and returns (final-norm hidden state [B, H], updated cache).

    window (static): attend over the first `window` slots only (the caller guarantees `cache.index < window`);
    the slots after it are empty, masked, and would only be read. None: every slot."""
    cfg = model.config
    dt = as_dtype(cfg.dtype)
    b, = tokens.shape
    nkv, d, eps = cfg.num_key_value_heads, cfg.dim_per_head, cfg.rms_norm_eps
    g = cfg.num_attention_heads // nkv
    chex.assert_shape([positions, live], (b,))
    slots = cache.valid.shape[1]
    seen = slots if window is None else int(window)
    if not 0 < seen <= slots:
        raise ValueError(f"decode_step: window={window} must be in [1, {slots}] (the cache's slots)")
    valid = jax.lax.dynamic_update_slice_in_dim(cache.valid, live[:, None], cache.index, axis=1)
    mask = ((jnp.arange(seen) <= cache.index)[None, :] & valid[:, :seen])[:, None, :]  # [B, 1, W]
    rope = rope_tables(positions[:, None], rope_inv_freq(cfg))  # once per step, shared by every layer
    x = model.embed_tokens(tokens)  # [B, H]
    ks, vs = [], []
    per_layer = gathers_per_layer(cfg)
    ready = x  # per_layer: the value whose arrival lets the next layer's gather start
    for w, k_cache, v_cache in zip(layers, cache.k, cache.v):
        if per_layer:
            # Tied to the previous layer's input, this layer's gather can neither leave the decode loop nor start
            # with every other layer's at the top of the step (what the TPU compiler does unordered, holding all
            # layers whole); it still overlaps the previous layer's compute.
            w, _ = jax.lax.optimization_barrier((w, ready))
            w = _decode_pin(w, keep_fsdp=False)
            ready = x
        xn = rms_norm(x, w.input_norm, eps, dt)
        qkv = jnp.einsum("bh,hkcd->bkcd", xn, w.qkv)
        if w.qkv_bias is not None:
            qkv = qkv + w.qkv_bias
        ad = w.adapters or {}
        if any(p in ad for p in "qkv"):
            qkv = qkv + jnp.concatenate([_adapter_out(xn, ad, p, n * d).reshape(b, nkv, n // nkv, d)
                                         for p, n in (("q", nkv * g), ("k", nkv), ("v", nkv))], axis=-2)
        q, k, v = qkv[:, :, :g], qkv[:, :, g], qkv[:, :, g + 1]
        if w.q_norm is not None:
            q, k = rms_norm(q, w.q_norm, eps, dt), rms_norm(k, w.k_norm, eps, dt)
        # apply_rope wants [B, T, heads, D]: the kv and group axes flatten into heads, T = 1.
        q = apply_rope(q.reshape(b, 1, nkv * g, d), rope).reshape(b, nkv, g, d)
        k = apply_rope(k.reshape(b, 1, nkv, d), rope).reshape(b, nkv, d, 1)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, 0, 0, cache.index))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[:, :, None].astype(v_cache.dtype), (0, 0, cache.index, 0))
        ks.append(k_cache), vs.append(v_cache)
        k_seen, v_seen = ((k_cache, v_cache) if seen == slots
                          else (k_cache[..., :seen], v_cache[:, :, :seen]))
        out = attend(q, k_seen, v_seen, mask, dt).reshape(b, nkv * g * d)
        out_o = jnp.dot(out, w.o)
        if "o" in ad:
            out_o = out_o + _adapter_out(out, ad, "o", out_o.shape[-1])
        x = x + (out_o if w.o_bias is None else out_o + w.o_bias)
        xn = rms_norm(x, w.post_norm, eps, dt)
        gu = jnp.einsum("bh,hci->bci", xn, w.gate_up)
        if w.gate_up_bias is not None:
            gu = gu + w.gate_up_bias
        if "gate" in ad or "up" in ad:
            gu = gu + jnp.stack([_adapter_out(xn, ad, p, gu.shape[-1]) for p in ("gate", "up")], axis=1)
        act = jax.nn.silu(gu[:, 0]) * gu[:, 1]
        y = jnp.dot(act, w.down)
        if "down" in ad:
            y = y + _adapter_out(act, ad, "down", y.shape[-1])
        x = x + (y if w.down_bias is None else y + w.down_bias)
    return model.norm(x), KVCache(tuple(ks), tuple(vs), valid, cache.index + 1)


def _adapter_out(x, adapters: dict, name: str, width: int):
    """x [B, in] @ A @ (scale * B) of projection `name`'s unmerged adapter, zeros [B, width] without one."""
    if name not in adapters:
        return jnp.zeros((x.shape[0], width), x.dtype)
    a, b = adapters[name]
    return jnp.dot(jnp.dot(x, a), b)
