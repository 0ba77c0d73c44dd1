"""Partition rules: every parameter, optimizer-state leaf, batch, activation and KV-cache buffer -> PartitionSpec.

A rule is `(path regex, spec)`; the path is the parameter's name with "/" separators, e.g.
`layers/mlp/up_proj/kernel`, matched at the end of the leaf's path, so the same rules cover the optimizer
state (`1/0/mu/layers/mlp/up_proj/kernel`). First match wins. Stacked layers carry a leading [layers] axis
that is never split.

    parameter                              shape          spec
    embed_tokens/weight                    [V, H]         (tp, fsdp)
    lm_head/kernel                         [H, V]         (fsdp, tp)
    layers/self_attn/{q,k,v}_proj/kernel   [L, H, heads*D] (-, fsdp, tp)   heads over tp
    layers/self_attn/{q,k,v}_proj/bias     [L, heads*D]    (-, tp)
    layers/self_attn/o_proj/kernel         [L, heads*D, H] (-, tp, fsdp)
    layers/mlp/{gate,up}_proj/kernel       [L, H, I]      (-, fsdp, tp)
    layers/mlp/down_proj/kernel            [L, I, H]      (-, tp, fsdp)
    norms, o_proj/down_proj biases         small          replicated
    .../{q,k,v,gate,up}_proj/lora/lora_a   [L, H, r]      (-, fsdp, -)         LoRA A, the rank whole
    .../{q,k,v,gate,up}_proj/lora/lora_b   [L, r, out]    (-, -, (tp, fsdp))   LoRA B
    .../{o,down}_proj/lora/lora_a          [L, in, r]     (-, (tp, fsdp), -)
    .../{o,down}_proj/lora/lora_b          [L, r, H]      (-, -, fsdp)

Batches are split by rows over data x fsdp. A dimension that does not divide its mesh axes is an error that
names the tensor: silent replication would quietly multiply memory.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxrl_reason.parallel.mesh import BATCH_AXES, axis_size

Rules = Sequence[tuple[str, tuple]]

DEFAULT_RULES: Rules = (
    (r"embed_tokens/weight", ("tp", "fsdp")),
    (r"lm_head/kernel", ("fsdp", "tp")),
    (r"layers/self_attn/(q|k|v)_proj/kernel", (None, "fsdp", "tp")),
    (r"layers/self_attn/(q|k|v)_proj/bias", (None, "tp")),
    (r"layers/self_attn/o_proj/kernel", (None, "tp", "fsdp")),
    (r"layers/mlp/(gate|up)_proj/kernel", (None, "fsdp", "tp")),
    (r"layers/mlp/(gate|up)_proj/bias", (None, "tp")),
    (r"layers/mlp/down_proj/kernel", (None, "tp", "fsdp")),
    # Everything small: norms (also q/k-norms), output biases.
    (r"\w*norm/weight", ()),
    (r"(o_proj|down_proj)/bias", ()),
    # LoRA adapters (models/lora.py), the rank never split: A [L, in, r] and B [L, r, out] split like their kernel's
    # input and output dims, and the one of the two whose kernel dim is tp-split also over fsdp, so that no adapter
    # is whole on every fsdp shard (B of q/k/v/gate/up is as large as a row of its kernel).
    (r"layers/self_attn/(q|k|v)_proj/lora/lora_a", (None, "fsdp", None)),
    (r"layers/self_attn/(q|k|v)_proj/lora/lora_b", (None, None, ("tp", "fsdp"))),
    (r"layers/self_attn/o_proj/lora/lora_a", (None, ("tp", "fsdp"), None)),
    (r"layers/self_attn/o_proj/lora/lora_b", (None, None, "fsdp")),
    (r"layers/mlp/(gate|up)_proj/lora/lora_a", (None, "fsdp", None)),
    (r"layers/mlp/(gate|up)_proj/lora/lora_b", (None, None, ("tp", "fsdp"))),
    (r"layers/mlp/down_proj/lora/lora_a", (None, ("tp", "fsdp"), None)),
    (r"layers/mlp/down_proj/lora/lora_b", (None, None, "fsdp")),
)

BATCH = BATCH_AXES

# Activation layouts, for `with_sharding_constraint` inside jitted code (see `constrain`).
ACTIVATIONS = {
    "tokens": P(BATCH, None),  # [batch, time]
    "hidden": P(BATCH, None, None),  # [batch, time, hidden]
    "logits": P(BATCH, None, "tp"),  # [batch, time, vocab]
    "heads": P(BATCH, None, "tp", None),  # [batch, time, heads, head_dim]
}


class ShardingError(ValueError):
    """A tensor cannot be laid out on the mesh as the rules ask."""


def path_str(keypath) -> str:
    """'layers/mlp/up_proj/kernel' from a JAX key path (nnx Variables' trailing `.value` dropped)."""
    parts = []
    for k in keypath:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    if parts and parts[-1] in ("value", "raw_value"):
        parts = parts[:-1]
    return "/".join(parts)


def _compiled(rules: Rules):
    return [(re.compile(r"(?:^|/)" + pat + r"$"), spec) for pat, spec in rules]


def check_divisible(name: str, shape: Sequence[int], spec: P, mesh: Mesh) -> None:
    if len(spec) > len(shape):
        raise ShardingError(f"{name}: spec {spec} has {len(spec)} entries but the tensor has rank {len(shape)} "
                            f"(shape {tuple(shape)})")
    for dim, (size, axes) in enumerate(zip(shape, spec)):
        n = axis_size(mesh, axes)
        if size % n:
            raise ShardingError(
                f"{name}: dimension {dim} of size {size} (shape {tuple(shape)}) does not divide over mesh axis "
                f"{axes!r} of size {n} (mesh {dict(mesh.shape)}). Choose a mesh_shape whose {axes!r} size divides "
                f"{size}, or give this tensor its own partition rule.")


def spec_for(name: str, shape: Sequence[int], mesh: Mesh, rules: Rules = DEFAULT_RULES,
             _compiled_rules=None) -> P:
    """The PartitionSpec of the tensor `name` (a '/' path), checked against `shape` and `mesh`."""
    for rx, spec in (_compiled_rules or _compiled(rules)):
        if rx.search(name):
            spec = P(*spec)
            check_divisible(name, shape, spec, mesh)
            return spec
    if len(shape) == 0:
        return P()  # scalars (optimizer step counts, ...) live everywhere
    raise ShardingError(f"{name}: no partition rule matches this tensor (shape {tuple(shape)}); add a "
                        f"(regex, spec) rule for it")


def tree_specs(tree, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """PartitionSpecs for a pytree of arrays (params, optimizer state, or their ShapeDtypeStructs)."""
    comp = _compiled(rules)
    return jax.tree_util.tree_map_with_path(
        lambda kp, x: spec_for(path_str(kp), np.shape(x), mesh, rules, comp), tree)


def tree_shardings(tree, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    return jax.tree.map(lambda s: NamedSharding(mesh, s), tree_specs(tree, mesh, rules),
                        is_leaf=lambda x: isinstance(x, P))


def check_model_on_mesh(cfg, mesh: Mesh) -> None:
    """Head-aligned tensor parallelism: each tp shard holds whole query and key/value heads (the KV cache is
    split by kv head), so tp must divide both head counts."""
    tp = mesh.shape["tp"]
    for field in ("num_attention_heads", "num_key_value_heads"):
        n = getattr(cfg, field)
        if n % tp:
            raise ShardingError(f"layers/self_attn: ModelConfig.{field}={n} does not divide over mesh axis 'tp' of "
                                f"size {tp}; attention heads are split over tp. Use a tp size that divides {n}.")


def param_shardings(model_or_params, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """NamedShardings for a model's parameter state (an `nnx.Module`, or its `nnx.State`)."""
    from flax import nnx

    if isinstance(model_or_params, nnx.Module):
        if hasattr(model_or_params, "config"):
            check_model_on_mesh(model_or_params.config, mesh)
        model_or_params = nnx.state(model_or_params)
    return tree_shardings(model_or_params, mesh, rules)


def put(x, sharding: NamedSharding) -> jax.Array:
    """Place a host array (identical in every process) on a sharding; each device gets only its slice, and in a
    multi-host run each process transfers only the slices of its own devices."""
    if isinstance(x, jax.Array) and (not x.is_fully_addressable or jax.process_count() == 1):
        # Never alias the source: the sharded update donates its inputs, which must not delete the caller's array.
        # A global array (spread over processes) is resharded device to device, never through one host.
        return jax.device_put(x, sharding, may_alias=False)
    a = np.asarray(x)
    return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])


def shard_tree(tree, shardings):
    """`put` every leaf on its sharding; `shardings` is a matching tree or one sharding for all leaves."""
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: put(x, shardings), tree)
    return jax.tree.map(put, tree, shardings)


def as_sharded(tree, shardings):
    """Like `shard_tree`, but a leaf already laid out as asked is kept as it is (no copy): a model loaded straight
    into its shardings is not duplicated on the way into the trainer."""
    def one(x, s):
        if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(s, x.ndim):
            return x
        return put(x, s)

    return jax.tree.map(one, tree, shardings)


def shard_params(params, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    return shard_tree(params, tree_shardings(params, mesh, rules))


def shard_model(model, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """The model with its parameters moved onto their shardings (in place: the module is updated)."""
    from flax import nnx

    state = nnx.state(model)
    nnx.update(model, shard_tree(state, param_shardings(model, mesh, rules)))
    return model


def init_sharded(cfg, mesh: Mesh, seed: int = 0, rules: Rules = DEFAULT_RULES):
    """A freshly initialised model whose parameters are created directly in their shardings: the initialiser
    is compiled with sharded outputs, so no device ever holds the full model."""
    from flax import nnx

    from jaxrl_reason.models.qwen2 import init_model

    check_model_on_mesh(cfg, mesh)
    abstract = nnx.eval_shape(lambda: init_model(cfg, seed))
    graphdef, abs_state = nnx.split(abstract)
    shardings = tree_shardings(abs_state, mesh, rules)
    state = jax.jit(lambda: nnx.state(init_model(cfg, seed)), out_shardings=shardings)()
    return nnx.merge(graphdef, state)


def loader_place(cfg, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Callable[[tuple, np.ndarray], jax.Array]:
    """`place(path, array)` for `hf_port.params_from_tensors`: each tensor goes straight from host memory into
    its sharding as the loader reads it."""
    check_model_on_mesh(cfg, mesh)
    comp = _compiled(rules)

    def place(path: tuple, a: np.ndarray) -> jax.Array:
        name = "/".join(map(str, path))
        return put(a, NamedSharding(mesh, spec_for(name, a.shape, mesh, rules, comp)))

    return place


def load_pretrained_sharded(path: str, mesh: Mesh, dtype: str = "float32", rules: Rules = DEFAULT_RULES, **kw):
    """`hf_port.load_pretrained` onto a mesh (the config is read first so the head check runs before loading)."""
    import json
    import os

    from jaxrl_reason.models.hf_port import config_from_hf, load_pretrained

    with open(os.path.join(path, "config.json")) as f:
        cfg = config_from_hf(json.load(f), param_dtype=dtype)
    return load_pretrained(path, dtype, place=loader_place(cfg, mesh, rules), **kw)


# ----------------------------------------------------------------------------------------------------------
# Batches, activations, KV cache


def batch_spec(ndim: int) -> P:
    """Rows over data x fsdp, every other dimension whole."""
    return P(BATCH, *([None] * (ndim - 1))) if ndim else P()


def batch_sharding(batch, mesh: Mesh):
    """NamedShardings for a pytree of [rows, ...] arrays (a TokenBatch), checked for divisibility."""
    def one(kp, x):
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)  # arrays or ShapeDtypeStructs
        spec = batch_spec(len(shape))
        check_divisible("batch/" + path_str(kp), shape, spec, mesh)
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(one, batch)


def shard_batch(batch, mesh: Mesh):
    """A host batch identical in every process -> global arrays split by rows."""
    return shard_tree(batch, batch_sharding(batch, mesh))


def global_batch_from_local(local_batch, mesh: Mesh, global_rows: int):
    """Each process passes only its own rows (`mesh.process_rows(global_rows, mesh)`); returns global arrays."""
    def one(kp, x):
        shape = (global_rows,) + tuple(np.shape(x)[1:])
        spec = batch_spec(len(shape))
        check_divisible("batch/" + path_str(kp), shape, spec, mesh)
        return jax.make_array_from_process_local_data(NamedSharding(mesh, spec), np.asarray(x), shape)

    return jax.tree_util.tree_map_with_path(one, local_batch)


def constrain(x: jax.Array, mesh: Mesh, kind: str) -> jax.Array:
    """`with_sharding_constraint` with one of the named activation layouts in ACTIVATIONS (inside jit)."""
    if kind not in ACTIVATIONS:
        raise KeyError(f"unknown activation layout {kind!r}; known: {sorted(ACTIVATIONS)}")
    spec = ACTIVATIONS[kind]
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def kv_cache_specs(cache) -> Any:
    """Specs for a `models.qwen2.KVCache`: k [B, KVH, D, S] and v [B, KVH, S, D] split by rows and kv heads,
    valid [B, S] by rows, the write index replicated."""
    kv = P(BATCH, "tp", None, None)
    return type(cache)(tuple(kv for _ in cache.k), tuple(kv for _ in cache.v), P(BATCH, None), P())


def kv_cache_shardings(cache, mesh: Mesh):
    specs = kv_cache_specs(cache)
    for i, (k, v) in enumerate(zip(cache.k, cache.v)):
        check_divisible(f"kv_cache/k[{i}]", k.shape, specs.k[i], mesh)
        check_divisible(f"kv_cache/v[{i}]", v.shape, specs.v[i], mesh)
    check_divisible("kv_cache/valid", cache.valid.shape, specs.valid, mesh)
    return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda x: isinstance(x, P))


def init_opt_state(optimizer, params, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """`optimizer.init(params)` created directly in the rule shardings."""
    abstract = jax.eval_shape(optimizer.init, params)
    return jax.jit(optimizer.init, out_shardings=tree_shardings(abstract, mesh, rules))(params)
