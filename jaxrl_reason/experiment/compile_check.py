"""Every executable of one RL step of a run config, compiled ahead of time for a TPU topology on a machine without
one: the compiler's own per-device memory and cost, a fit verdict, and a roofline lower bound on the step's time.

With `libtpu` installed, `jax.experimental.topologies.get_topology_desc("v5e:4x4", "tpu")` gives the devices of a
slice; arrays described by `jax.ShapeDtypeStruct`s laid out on a mesh of those devices (the run's own `parallel`
mesh and partition rules) are lowered and `.compile()` runs the TPU compiler. Nothing is allocated: parameters come
from `nnx.eval_shape` of the config's model (its config.json, or the preset its directory name names).

NVIDIA GPUs the same way: with the CUDA PJRT plugin (`pip install jax-cuda12-plugin==<jax version>`; no GPU, driver
or CUDA library), "h100:8" gives 8 compile-only H100s from the part's target description
(`parallel.gpu_targets`) and `.compile()` runs XLA's GPU compiler (`gpu_topology_devices`). That compiler's memory
analysis is reported as the TPU's is; it gives no cost analysis, so there the roofline is FLOPs-only except for the
decode (whose bytes are analytic).

The executables of one step (`step_executables`), at the shapes the trainer gives them:
    rollout prefill / decode   Q prompts (left-padded to a power of two), G samples each, rl.max_new_tokens
    method sampling            CURE critiques and guided re-solves, CIPO corrections (their budgets; rows and
                               prompt lengths at their upper bounds: the critique batch's size and its wrong half
                               re-solved, `methods.cure.CURE.critique_sizes`; prompts that hold a whole completion)
    pi_old / reference scoring the forward of `rl.scoring.reference_logprobs` on the update's batch (when a KL
                               term reads a reference, or the method recomputes pi_old, as CURE does)
    update                     the fused `train.update` with the method's loss terms, rl.micro_batches, the LM
                               head at the completion positions (`scored`), params and optimizer state donated
    eval prefill / decode      rl.eval_batch_size questions, one greedy sample (when rl.eval_every > 0)
The update's rows are `parallel.plan.train_rows` when the config plans them, else Q x G (twice that for RL^V's
verify rows); its length `parallel.plan.context`, else prompt + rl.max_new_tokens. Rows are never shared-prompt
(the trainer shares prompts only when rows are not split over devices).

Per executable: compile seconds; the compiler's per-device bytes (`memory_analysis()`: arguments, outputs,
aliased, temporaries, generated code); FLOPs and bytes accessed (`cost_analysis()`, which counts a loop body --
the layer and micro-batch scans, the decode while-loop -- once, not per trip); and the analytic FLOPs
(`parallel.roofline`). The step's peak is the largest executable's live bytes (arguments + outputs - aliased +
temporaries + code) plus the resident state it does not take as an argument (the optimizer state during sampling,
the reference params), against the chip's HBM. The roofline time of an executable is
max(analytic FLOPs per device / peak FLOP/s, bytes per device / HBM bandwidth), with the decode's bytes the
roofline's (every parameter once and the valid KV cache once per step, times the steps) and every other
executable's the compiler's count; the MFU bound is the step's analytic FLOPs over its roofline time at peak.
"""
from __future__ import annotations

import dataclasses
import datetime
import math
import os
import re
import time
from typing import Any, Callable, Optional

import numpy as np

GiB = 1024 ** 3
CHIP_FAMILIES = ("v4", "v5e", "v5p", "v6e")
GPU_FAMILIES = ("h100", "a100")  # `parallel.gpu_targets.GPU_TARGETS`
_TOPOLOGY = re.compile(r"^(v4|v5e|v5p|v6e):(\d+)x(\d+)(?:x(\d+))?$")
_GPU_TOPOLOGY = re.compile(r"^(h100|a100):(?:(\d+)x)?(\d+)$")  # CHIP:GPUS (one node) or CHIP:NODESxGPUS
TOPOLOGY_EXAMPLES = ("v5e:2x2, v5e:4x4 (v5e-16), v5p:2x2x1 (v5p-8), v6e:2x4 (v6e-8), v4:2x2x1; "
                     "h100:8 (one 8-GPU node), h100:2x8 (two), a100:8")


class CompileCheckError(ValueError):
    """A setting that cannot be compiled as given, found before anything is compiled."""


# ------------------------------------------------------------------------------------------------ topology, mesh


def libtpu_available() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


def cuda_plugin_available() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:  # no plugin of any kind: the `jax_plugins` namespace package itself is absent
        return False


def gpu_topology_devices(name: str) -> list:
    """Compile-only devices of NVIDIA GPUs, "h100:8" (one node of 8) or "h100:2x8" (2 nodes of 8), through the
    CUDA PJRT plugin and the part's target description (`parallel.gpu_targets`): no GPU, driver or CUDA library.
    The plugin checks the installed CUDA libraries against a driver when JAX starts, which fails on a machine
    without one; JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 skips that check, and must be set before JAX starts its
    backends (`experiments/launch/compile_tpu.py` sets it first thing)."""
    from jaxrl_reason.parallel.gpu_targets import gpu_target_config

    chip, nodes, gpus = _GPU_TOPOLOGY.match(name).groups()
    if not cuda_plugin_available():
        raise CompileCheckError(f"--topology {name!r}: compiling for NVIDIA GPUs needs the CUDA PJRT plugin: "
                                "pip install jax-cuda12-plugin==<your jax> (no GPU or CUDA libraries needed)")
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(platform="cuda", target_config=gpu_target_config(chip),
                                            topology=f"1x{int(nodes or 1)}x{int(gpus)}")
    except Exception as e:  # noqa: BLE001 - the plugin raises JaxRuntimeError / NotImplementedError
        raise CompileCheckError(f"--topology {name!r}: the CUDA plugin refused it ({str(e).splitlines()[0][:300]}). "
                                "If JAX had started its backends before JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 was set, "
                                "the plugin failed its driver check: set it in the environment") from e
    return list(topo.devices)


def topology_devices(name: str) -> list:
    """The devices of a TPU topology like "v5e:4x4", or of NVIDIA GPUs like "h100:8" (`gpu_topology_devices`). A
    malformed name fails here, naming the valid forms, before libtpu is asked; libtpu's own refusal (v5e:1x1: the
    smallest v5e is 2x2) is passed on with the same hint."""
    if _GPU_TOPOLOGY.match(name or ""):
        return gpu_topology_devices(name)
    if not _TOPOLOGY.match(name or ""):
        raise CompileCheckError(f"--topology {name!r} is not a TPU topology (CHIP:AxB[xC], CHIP one of "
                                f"{', '.join(CHIP_FAMILIES)}) nor GPUs (CHIP:[NODESx]GPUS, CHIP one of "
                                f"{', '.join(GPU_FAMILIES)}); e.g. {TOPOLOGY_EXAMPLES}")
    if not libtpu_available():
        raise CompileCheckError('compiling for a TPU topology needs libtpu: pip install "jax[tpu]==<your jax>"')
    # Another process that initialised libtpu (any JAX program without JAX_PLATFORMS=cpu, once libtpu is installed)
    # holds its lockfile; compiling for a topology touches no chip, so it need not wait for it.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(topology_name=name, platform="tpu").devices)
    except Exception as e:  # noqa: BLE001 - libtpu raises JaxRuntimeError with its reason
        raise CompileCheckError(f"--topology {name!r}: libtpu refused it ({str(e).splitlines()[0][:300]}); valid "
                                f"examples: {TOPOLOGY_EXAMPLES}") from e


def topology_mesh(mesh_shape, devices: list):
    """The ("data", "fsdp", "tp") mesh of `parallel.mesh_shape` over the first devices of a topology. -1 takes the
    rest of the topology; fixed sizes must multiply to a divisor of its device count."""
    from jax.sharding import Mesh

    from jaxrl_reason.parallel.mesh import AXES

    n = len(devices)
    shape = dict(mesh_shape or {"data": 1, "fsdp": 1, "tp": 1})
    unknown = sorted(set(shape) - set(AXES))
    if unknown:
        raise CompileCheckError(f"parallel.mesh_shape has unknown axis name(s) {unknown}; the axes are {AXES}")
    sizes = [int(shape.get(a, 1)) for a in AXES]
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1 or any(s == 0 or s < -1 for s in sizes):
        raise CompileCheckError(f"parallel.mesh_shape {shape}: give positive sizes, and -1 (the rest) on at most "
                                "one axis")
    fixed = math.prod(s for s in sizes if s != -1)
    if n % fixed:
        raise CompileCheckError(f"parallel.mesh_shape {shape} needs {fixed} devices per "
                                f"{'-1 share' if free else 'mesh'}, which does not divide the topology's {n} "
                                f"devices; the product of the fixed sizes must be one of {divisors}")
    if free:
        sizes[free[0]] = n // fixed
    used = math.prod(sizes)
    grid = np.asarray(devices[:used], dtype=object).reshape(sizes)
    try:  # tp on the fastest links, as make_mesh does on real hardware
        from jax.experimental import mesh_utils

        if used == n:
            grid = mesh_utils.create_device_mesh(sizes, devices=devices)
    except Exception:  # noqa: BLE001 - a shape the helper does not place: the plain order still compiles
        pass
    return Mesh(grid, AXES)


# ------------------------------------------------------------------------------------------------ the run's shapes


def run_model_config(rc):
    """(ModelConfig, where it came from) of a RunConfig's policy without loading weights: `model.hf_path`'s
    config.json when it is on disk, else the preset whose name is that directory's name, else the from-scratch
    model of the config's own fields. `model.remat` and `model.decode_weights` apply."""
    from jaxrl_reason.models import presets
    from jaxrl_reason.models.qwen2 import ModelConfig

    m = rc.model
    dtype, compute = m.dtype, m.compute_dtype or m.dtype
    path = m.hf_path
    if path and os.path.isfile(os.path.join(path, "config.json")):
        cfg, source = presets.load_model_config(path, dtype, compute), path
    elif not path and not m.gguf_path:
        cfg = ModelConfig(vocab_size=rc.tokenizer.vocab_size, hidden_size=m.hidden_size,
                          intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
                          num_attention_heads=m.num_attention_heads, num_key_value_heads=m.num_key_value_heads,
                          max_position_embeddings=m.max_position_embeddings,
                          tie_word_embeddings=m.tie_word_embeddings, param_dtype=dtype, dtype=compute)
        source = "from scratch"
    else:
        name = os.path.basename(os.path.normpath(path)).lower() if path else ""
        if name not in presets.PRESETS:
            raise CompileCheckError(f"model.hf_path={path!r} has no config.json here and its name matches no preset "
                                    f"({', '.join(presets.PRESETS)}); point it at a directory with a config.json")
        cfg, source = presets.load_model_config(name, dtype, compute), f"preset {name}"
    return cfg.replace(remat=cfg.remat or m.remat, decode_weights=m.decode_weights), source


def proxy_depth(cfg, source: str, layers: Optional[int]):
    """(cfg, source) with `layers` decoder layers, the rest of the model's shape kept (None: as it is): the proxy
    `compile_tpu.py --layers` compiles and `plan_step.py --layers` plans."""
    if layers is None:
        return cfg, source
    if layers <= 0:
        raise CompileCheckError(f"--layers={layers}: the proxy needs at least one decoder layer")
    return cfg.replace(num_hidden_layers=int(layers)), f"{source}, {layers} layers"


@dataclasses.dataclass(frozen=True)
class StepShapes:
    """The shapes one RL step runs at (see the module docstring for where each comes from)."""

    prompts: int  # Q
    samples: int  # G
    prompt_len: int  # prompt tokens the update's rows hold
    sample_prompt_len: int  # the sampler's left-padded prompt length (a power of two)
    new_tokens: int
    train_rows: int  # rows of one update (a mini-batch)
    train_length: int
    micro_batches: int
    eval_prompts: int  # 0: no periodic evaluation
    eval_new_tokens: int


def step_shapes(rc, method_name: str) -> StepShapes:
    from jaxrl_reason.buckets import power_of_two

    r, p = rc.rl, rc.parallel
    plan = p.plan
    prompt = (plan.prompt_tokens if plan is not None and plan.prompt_tokens else p.prompt_tokens)
    # RL^V and the "_v" methods (ppo_v, vineppo_v, cipo_v, ...) add one verify row per rollout at most
    verify = method_name.startswith("rlv") or method_name.endswith("_v")
    rows = r.prompts_per_step * r.samples_per_prompt * (2 if verify else 1)
    length = prompt + r.max_new_tokens
    if plan is not None and plan.train_rows:
        rows, length = plan.train_rows, plan.context or length
    rows = -(-rows // r.num_mini_batches)  # one update takes one mini-batch of the step's rows
    return StepShapes(r.prompts_per_step, r.samples_per_prompt, prompt, power_of_two(prompt), r.max_new_tokens,
                      rows, length, r.micro_batches, r.eval_batch_size if r.eval_every else 0,
                      r.eval_max_new_tokens or r.max_new_tokens)


def check_batch(shapes: StepShapes, shards: int) -> None:
    """The update's rows split into micro-batches and each micro-batch over the data x fsdp shards: refused here
    (the trainer would pad with filler rows, each a full row of compute) with the values that divide."""
    block = shapes.micro_batches * shards
    if shapes.train_rows % block:
        per_shard = shapes.train_rows // shards if shapes.train_rows % shards == 0 else None
        valid = ([m for m in range(1, per_shard + 1) if per_shard % m == 0] if per_shard else [])
        hint = (f"rl.micro_batches in {valid}" if valid else
                f"a row count (parallel.plan.train_rows, or rl.prompts_per_step x rl.samples_per_prompt) that is a "
                f"multiple of data x fsdp = {shards}")
        raise CompileCheckError(f"the update's {shapes.train_rows} rows do not split into rl.micro_batches="
                                f"{shapes.micro_batches} x data x fsdp={shards} equal blocks; use {hint}")


# ------------------------------------------------------------------------------------------------ executables


@dataclasses.dataclass
class Executable:
    """One jitted function of the step: `lower()` -> jax Lowered; what it costs by the formulas; what of the
    resident state (bytes per device) lives beside it without being its argument; how many times a step runs it."""

    name: str
    lower: Callable[[], Any]
    flops: float  # analytic model FLOPs of one call, whole mesh
    resident_bytes: int = 0
    calls: int = 1
    roofline_bytes: Optional[float] = None  # per device per call; None: the compiler's bytes accessed
    note: str = ""


def _abstract(tree, shardings):
    import jax

    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _per_device_bytes(tree) -> int:
    import jax

    total = 0
    for x in jax.tree.leaves(tree):
        shard = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) is not None else x.shape
        total += math.prod(shard) * np.dtype(x.dtype).itemsize
    return total


def _sampler_executables(tag: str, graphdef, params, mesh, cfg, prompts: int, samples: int, prompt_len: int,
                         new_tokens: int, resident: int, calls: int = 1) -> list[Executable]:
    """The sampler's prefill and decode for `prompts` prompts of `prompt_len` tokens, `samples` each, as
    `sampling.sampler.sample` calls them on `mesh` (rows padded to the batch shards)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from jaxrl_reason.buckets import sampler_rows
    from jaxrl_reason.models.qwen2 import as_dtype
    from jaxrl_reason.parallel.mesh import batch_shards
    from jaxrl_reason.parallel.roofline import decode_bytes, decode_flops, forward_flops, causal_pairs
    from jaxrl_reason.parallel.rules import BATCH, kv_cache_shardings
    from jaxrl_reason.sampling import sampler

    shards = batch_shards(mesh)
    b = sampler_rows(prompts)
    b += (-b) % shards
    n = b * samples
    rows = NamedSharding(mesh, P(BATCH))
    rep = NamedSharding(mesh, P())
    tokens = jax.ShapeDtypeStruct((b, prompt_len), jnp.int32, sharding=NamedSharding(mesh, P(BATCH, None)))
    lengths = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=rows)
    static = dict(num_samples=samples, max_new_tokens=new_tokens, mesh=mesh)

    def carry_of():
        cache, last = jax.eval_shape(lambda s, t, l: sampler.prefill(graphdef, s, t, l, **static), params, tokens,
                                     lengths)
        row2 = NamedSharding(mesh, P(BATCH, None))
        sd = lambda shape, dt, s: jax.ShapeDtypeStruct(shape, dt, sharding=s)  # noqa: E731
        cache = _abstract(cache, kv_cache_shardings(cache, mesh))
        return sampler.DecodeCarry(
            cache=cache, hidden=sd(last.shape, last.dtype, row2), tokens=sd((n, new_tokens), jnp.int32, row2),
            logprobs=sd((n, new_tokens), jnp.float32, row2), sampling_logprobs=sd((n, new_tokens), jnp.float32, row2),
            done=sd((n,), jnp.bool_, rows), finish=sd((n,), jnp.int32, rows), lengths=sd((n,), jnp.int32, rows),
            positions=sd((n,), jnp.int32, rows), step=sd((), jnp.int32, rep),
            key=sd((2,), jnp.uint32, rep))

    scalars = (jax.ShapeDtypeStruct((), jnp.float32, sharding=rep), jax.ShapeDtypeStruct((), jnp.float32, sharding=rep),
               jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
               jax.ShapeDtypeStruct((sampler.MAX_STOP_IDS,), jnp.int32, sharding=rep),
               jax.ShapeDtypeStruct((), jnp.int32, sharding=rep))
    end_step = jax.ShapeDtypeStruct((), jnp.int32, sharding=rep)
    # The decode roofline per device: every parameter once (gathered over fsdp, split over tp) and this device's
    # rows of the valid KV cache (rows over data x fsdp, kv heads over tp), per step.
    tp = mesh.shape["tp"]
    param_bytes = sum(math.prod(x.shape) * np.dtype(as_dtype(cfg.dtype)).itemsize for x in jax.tree.leaves(params))
    roof = decode_bytes(cfg, n // shards, prompt_len, new_tokens, param_bytes // tp,
                        np.dtype(as_dtype(cfg.dtype)).itemsize)
    roof_bytes = (roof["param_bytes"] + roof["kv_bytes_per_step"] / tp) * new_tokens
    prefill_flops = forward_flops(cfg, b * prompt_len, b * causal_pairs(prompt_len), 0)["flops"]
    def lower_prefill():
        with jax.set_mesh(mesh):  # as sample() traces it: the model pins its activations' rows to the mesh
            return sampler.prefill.lower(graphdef, params, tokens, lengths, **static)

    def lower_decode():
        with jax.set_mesh(mesh):
            return sampler.decode.lower(graphdef, params, carry_of(), end_step, *scalars, mesh=mesh)

    return [
        Executable(f"{tag} prefill", lower_prefill, prefill_flops, resident, calls,
                   note=f"{b} prompts x {prompt_len} tokens"),
        Executable(f"{tag} decode", lower_decode,
                   decode_flops(cfg, n, prompt_len, new_tokens), resident, calls, roof_bytes,
                   note=f"{n} rows x {new_tokens} steps"),
    ]


def step_executables(rc, cfg, mesh, *, rules=None) -> tuple[list[Executable], dict]:
    """Every executable of one RL step of run config `rc` with model `cfg` on `mesh` (abstract: nothing is
    allocated), and a dict describing the step (shapes, per-device resident bytes)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxrl_reason.methods import make_method
    from jaxrl_reason.models.lora import TRAINABLE, attach_lora, base_graphdef, base_state
    from jaxrl_reason.models.qwen2 import init_model
    from jaxrl_reason.parallel.mesh import batch_shards
    from jaxrl_reason.parallel.roofline import causal_pairs, forward_flops
    from jaxrl_reason.parallel.rules import DEFAULT_RULES, batch_sharding, check_model_on_mesh, tree_shardings
    from jaxrl_reason.rl.batch import TokenBatch, scored_size
    from jaxrl_reason.rl.losses import needs_reference, needs_values, scoring_temperatures
    from jaxrl_reason.rl.scoring import reference_scorer
    from jaxrl_reason.train.state import make_optimizer
    from jaxrl_reason.train.trainer import optimizer_steps
    from jaxrl_reason.train.update import VALUE_HEAD_RULES, make_sharded_update, split_trainable

    rules = tuple(DEFAULT_RULES if rules is None else rules) + VALUE_HEAD_RULES
    method = make_method(rc.method)
    terms = method.terms()
    if method.critic is not None or needs_values(terms):
        raise CompileCheckError(f"method {method.name!r} trains a learned critic; its value executables are not "
                                "modelled by the compile check yet (use a critic-free method)")
    try:
        check_model_on_mesh(cfg, mesh)
    except ValueError as e:  # parallel.rules.ShardingError: tp does not divide the heads
        raise CompileCheckError(f"parallel.mesh_shape: {e}") from e
    shapes = step_shapes(rc, method.name)
    shards = batch_shards(mesh)
    check_batch(shapes, shards)
    r = rc.rl

    lora = getattr(rc, "lora", None)
    lora_on = lora is not None and lora.enabled
    # A LoRA policy: its adapters in the param tree, only they trained and in the optimizer state, and the KL
    # reference the base with the adapters off (no copy of the weights).
    model = nnx.eval_shape(lambda: attach_lora(init_model(cfg, 0), lora, 0) if lora_on else init_model(cfg, 0))
    trainable = TRAINABLE if lora_on else None
    graphdef, state = nnx.split(model)
    try:
        params = _abstract(state, tree_shardings(state, mesh, rules))
    except ValueError as e:  # a parameter dimension that does not divide its mesh axes, named by the rules
        raise CompileCheckError(f"parallel.mesh_shape {dict(mesh.shape)}: {e}") from e
    optimizer = make_optimizer(r.lr, total_steps=optimizer_steps(r), warmup_steps=r.warmup_steps, schedule=r.schedule,
                               weight_decay=r.weight_decay, clip_norm=r.clip_norm)
    opt_abs = jax.eval_shape(optimizer.init, split_trainable(params, trainable)[0])
    opt_state = _abstract(opt_abs, tree_shardings(opt_abs, mesh, rules))
    reference = needs_reference(terms)
    p_bytes, o_bytes = _per_device_bytes(params), _per_device_bytes(opt_state)
    ref_bytes = p_bytes if reference and not lora_on else 0

    # The update's batch: rows over data x fsdp, the completion positions trained (the LM head's `scored` at its
    # upper bound: every completion token of every row).
    rows, length, completion = shapes.train_rows, shapes.train_length, shapes.train_length - shapes.prompt_len
    sd = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt)  # noqa: E731
    host = TokenBatch(sd((rows, length), jnp.int32), sd((rows, length), jnp.int32), sd((rows, length), jnp.int32),
                      sd((rows, length), jnp.float32), sd((rows, length), jnp.float32),
                      sd((rows, length), jnp.float32), sd((rows, length), jnp.float32) if reference else None,
                      sd((rows,), jnp.int32))
    batch = _abstract(host, batch_sharding(host, mesh))
    mask = np.zeros((rows, length), bool)
    mask[:, shapes.prompt_len:] = True
    scored = scored_size(TokenBatch(*([None] * 3), mask, *([None] * 4)), shapes.micro_batches, shards) \
        if r.head_at_trained_only else None
    temperature = float(r.temperature)
    update, *_ = make_sharded_update(graphdef, optimizer, terms, mesh, params, opt_state, rules=rules,
                                     micro_batches=shapes.micro_batches, logprob_chunk=r.logprob_chunk,
                                     temperature=temperature, matmuls="ynn", trainable=trainable)
    tokens = rows * length
    attended = rows * causal_pairs(length)
    fwd = forward_flops(cfg, tokens, attended, rows * completion)["flops"]
    epochs = r.num_iterations * r.num_mini_batches

    q, g = shapes.prompts, shapes.samples
    exes = _sampler_executables("rollout", graphdef, params, mesh, cfg, q, g, shapes.sample_prompt_len,
                                shapes.new_tokens, o_bytes + ref_bytes)
    from jaxrl_reason.buckets import power_of_two

    # The parts the method samples beyond the rollouts (a union has several: methods.self_check).
    parts = method.parts() if hasattr(method, "parts") else ()
    if "critique" in parts:
        crit_rows, guided_prompts = method.critique_sizes(q, g)  # the method's own call sizes
        crit_prompt = power_of_two(shapes.sample_prompt_len + shapes.new_tokens + 32)
        crit_tokens = method.critique_max_new_tokens or shapes.new_tokens  # 0: the run's budget
        exes += _sampler_executables("critique", graphdef, params, mesh, cfg, crit_rows, 1, crit_prompt,
                                     crit_tokens, o_bytes + ref_bytes)
        guided_prompt = power_of_two(shapes.sample_prompt_len + crit_tokens)
        exes += _sampler_executables("guided", graphdef, params, mesh, cfg, guided_prompts, method.guided_samples,
                                     guided_prompt, method.guided_max_new_tokens or shapes.new_tokens,
                                     o_bytes + ref_bytes)
    if "correct" in parts:
        corr_prompt = power_of_two(shapes.sample_prompt_len + shapes.new_tokens)
        replay = method.replay_prompts or q
        per_call = min(method.correction_prompts_per_call or replay, replay)
        exes += _sampler_executables("correction", graphdef, params, mesh, cfg, per_call,
                                     method.correction_samples, corr_prompt,
                                     method.correction_max_new_tokens or shapes.new_tokens, o_bytes + ref_bytes,
                                     calls=-(-replay // per_call))
    if getattr(method, "vine_samples", 0):  # VinePPO: K continuations of every step boundary of every rollout
        states = q * g * (method.max_steps - 1 + (0 if method.s0_from_group else 1))  # at its cap
        per_call = min(method.vine_prompts_per_call or states, states)
        # a prefix holds the prompt and part of the completion; a continuation keeps the rollout's own budget
        exes += _sampler_executables("vine", graphdef, params, mesh, cfg, per_call, method.vine_samples,
                                     power_of_two(shapes.sample_prompt_len + shapes.new_tokens), shapes.new_tokens,
                                     o_bytes + ref_bytes, calls=-(-states // per_call))
    if reference or "critique" in parts:  # CURE recomputes pi_old of forced and replayed tokens
        ref_temps = scoring_temperatures(terms, temperature)
        no_ref = host._replace(ref_logprobs=None)
        score_batch = _abstract(no_ref, batch_sharding(no_ref, mesh))
        ref_scored = scored_size(TokenBatch(*([None] * 3), mask, *([None] * 4)), shapes.micro_batches, shards) \
            if r.head_at_trained_only else None
        ref_graphdef, ref_params = (base_graphdef(model), base_state(params)) if lora_on else (graphdef, params)
        scorer = reference_scorer(ref_graphdef, mesh, chunk_size=r.logprob_chunk, temperature=ref_temps,
                                  micro_batches=shapes.micro_batches)
        what = "reference scoring" if reference else "pi_old scoring"
        # Beside it live the policy's params and optimizer state (the reference params are its argument); CURE's
        # pi_old recomputation takes the policy's params and leaves the optimizer state beside it.
        # A LoRA policy's reference is its own base weights: only the adapters live beside them.
        beside = p_bytes - _per_device_bytes(ref_params) if lora_on else p_bytes
        exes.append(Executable(what, lambda: scorer.lower(ref_params, score_batch, ref_scored), fwd,
                               (beside + o_bytes) if reference else o_bytes,
                               note=f"{rows} rows x {length} tokens"))
    exes.append(Executable("update", lambda: update.lower(params, opt_state, batch, scored), 3 * fwd, ref_bytes,
                           epochs, note=f"{rows} rows x {length} tokens, {shapes.micro_batches} micro-batches"))
    if shapes.eval_prompts:
        exes += _sampler_executables("eval", graphdef, params, mesh, cfg, shapes.eval_prompts, 1,
                                     shapes.sample_prompt_len, shapes.eval_new_tokens, o_bytes + ref_bytes,
                                     calls=0)  # not part of a training step; its fit still counts
    info = dict(method=method.name, terms=[t.name for t in terms], shapes=dataclasses.asdict(shapes), scored=scored,
                params_bytes=p_bytes, opt_state_bytes=o_bytes, reference_params_bytes=ref_bytes,
                batch_bytes=_per_device_bytes(batch), num_params=cfg.num_params(),
                lora_rank=lora.rank if lora_on else 0)
    return exes, info


# ------------------------------------------------------------------------------------------------ compile, report


def _hbm_error(text: str) -> bool:
    t = text.lower()
    return "exceeds available hbm" in t or "resource_exhausted" in t or "ran out of memory" in t \
        or "out of memory" in t


def compile_one(exe: Executable, chip, hbm_bytes: float, devices: int) -> dict:
    """Lower and compile one executable; its row of the report (a compile refused for memory is a DOES NOT FIT row,
    any other failure re-raised)."""
    t0 = time.perf_counter()
    lowered = exe.lower()
    t1 = time.perf_counter()
    row = dict(name=exe.name, note=exe.note, calls=exe.calls, lower_s=t1 - t0, analytic_flops=exe.flops,
               resident_bytes=exe.resident_bytes)
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - XLA raises JaxRuntimeError / XlaRuntimeError
        if not _hbm_error(str(e)):
            raise
        first = str(e).splitlines()[0][:500]
        temp = re.search(r"HLO temporaries \(([\d.]+)G\)", first)  # XLA writes GiB as "G"
        row.update(compile_s=time.perf_counter() - t1, fits=False, compiler_refused=first, peak_bytes=None,
                   refused_temp_bytes=float(temp.group(1)) * GiB if temp else None)
        return row
    row["compile_s"] = time.perf_counter() - t1
    m = compiled.memory_analysis()
    mem = dict(argument=m.argument_size_in_bytes, output=m.output_size_in_bytes, alias=m.alias_size_in_bytes,
               temp=m.temp_size_in_bytes, code=m.generated_code_size_in_bytes)
    live = mem["argument"] + mem["output"] - mem["alias"] + mem["temp"] + mem["code"]
    cost = compiled.cost_analysis() or {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    flops_dev = exe.flops / devices
    # XLA's GPU compiler returns no cost analysis: there an executable without analytic bytes (all but the decode)
    # has a FLOPs-only roofline, still a lower bound on its time.
    compiler_bytes = float(cost["bytes accessed"]) if "bytes accessed" in cost else None
    bytes_dev = exe.roofline_bytes if exe.roofline_bytes is not None else (compiler_bytes or 0.0)
    roof_s = None
    if chip is not None:
        roof_s = max(flops_dev / (chip.tflops * 1e12), bytes_dev / (chip.hbm_gbs * 1e9))
    peak = live + exe.resident_bytes
    row.update(memory=mem, live_bytes=live, peak_bytes=peak, fits=peak <= hbm_bytes,
               compiler_flops=float(cost["flops"]) if "flops" in cost else None, compiler_bytes=compiler_bytes,
               roofline_bytes=bytes_dev if exe.roofline_bytes is not None or compiler_bytes is not None else None,
               roofline_s=roof_s)
    return row


def run_check(rc, topology: str, *, hbm_gb: Optional[float] = None, only: Optional[set] = None,
              log: Callable[[str], None] = print, config_name: str = "", layers: Optional[int] = None) -> dict:
    """Compile every executable of one RL step of `rc` for `topology`; the report dict (`render_markdown`).
    layers: compile a proxy of the model with this many decoder layers (the rest of its shape kept): a 7B's
    executables compile in minutes at 2 layers instead of its 28, and per-layer terms scale from it."""
    import jax

    from jaxrl_reason.parallel.roofline import chip_for

    devices = topology_devices(topology)
    mesh = topology_mesh(dict(rc.parallel.mesh_shape), devices)
    cfg, source = proxy_depth(*run_model_config(rc), layers)
    chip = chip_for(devices[0].device_kind)
    hbm_gib = hbm_gb if hbm_gb is not None else (chip.hbm_gib if chip else None)
    if hbm_gib is None:
        raise CompileCheckError(f"device kind {devices[0].device_kind!r} has no HBM size in the table; pass --hbm-gb")
    hbm = hbm_gib * GiB
    exes, info = step_executables(rc, cfg, mesh)
    info["planner_mesh"] = {a: int(v) for a, v in mesh.shape.items()}
    if only:
        exes = [e for e in exes if e.name in only or e.name.split()[-1] in only]
    n = mesh.size
    rows = []
    for exe in exes:
        row = compile_one(exe, chip, hbm, n)
        rows.append(row)
        if row.get("peak_bytes") is None:
            log(f"{exe.name}: DOES NOT FIT (the compiler refused it in {row['compile_s']:.1f} s: "
                f"{row['compiler_refused']})")
        else:
            log(f"{exe.name}: compiled in {row['compile_s']:.1f} s; peak {row['peak_bytes'] / GiB:.2f} GiB of "
                f"{hbm_gib:g} ({'FITS' if row['fits'] else 'DOES NOT FIT'})")
    done = [r for r in rows if r.get("peak_bytes") is not None]
    fits = all(r["fits"] for r in rows)
    step_rows = [r for r in done if r["calls"]]
    step_s = sum(r["roofline_s"] * r["calls"] for r in step_rows) if chip and len(step_rows) == sum(
        1 for r in rows if r["calls"]) else None
    step_flops = sum(r["analytic_flops"] * r["calls"] for r in rows if r["calls"])
    mfu = step_flops / (step_s * n * chip.tflops * 1e12) if step_s else None
    res = dict(
        meta=dict(config=config_name, topology=topology, devices=len(devices), mesh=dict(mesh.shape),
                  device_kind=devices[0].device_kind, chip=chip._asdict() if chip else None, hbm_gib=hbm_gib,
                  model=source, model_params=cfg.num_params(), param_dtype=cfg.param_dtype, dtype=cfg.dtype,
                  remat=cfg.remat, jax_version=jax.__version__,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **info),
        executables=rows,
        step=dict(peak_bytes=max((r["peak_bytes"] for r in done), default=None), fits=fits,
                  roofline_s=step_s, model_flops=step_flops, mfu_bound=mfu,
                  compile_s=sum(r["compile_s"] for r in rows)))
    res["planner"] = planner_vs_compiler(rc, cfg, info["planner_mesh"], res)
    return res


def step_plan(rc, cfg, mesh_sizes: dict, info: dict):
    """`parallel.memory.plan` of one step at the model, mesh and batch `step_executables` compiles (its `info`)."""
    from jaxrl_reason.parallel.memory import BatchSettings, plan

    sh = info["shapes"]
    return plan(cfg, mesh_sizes, BatchSettings(sh["train_rows"], sh["train_length"], sh["prompts"] * sh["samples"],
                                               sh["sample_prompt_len"] + sh["new_tokens"], sh["micro_batches"],
                                               rc.rl.logprob_chunk, info["scored"]))


def planner_vs_compiler(rc, cfg, mesh_sizes: dict, res: dict) -> list[dict]:
    """`parallel.memory.plan` for the same model, mesh and batch beside the compiler's bytes, component by
    component (per device): params + optimizer state (the update's arguments less its batch), gradients +
    activations (the update's temporaries), the KV cache (the rollout decode's arguments less the params) and the
    sampler's temporaries, and the peak. Components whose executable was not compiled are left out."""
    m = res["meta"]
    rows = {r["name"]: r for r in res["executables"] if r.get("memory")}
    p = step_plan(rc, cfg, mesh_sizes, m)
    out = []
    upd, dec = rows.get("update"), rows.get("rollout decode")
    refused = next((r for r in res["executables"] if r["name"] == "update" and r.get("refused_temp_bytes")), None)
    if refused:  # the temporaries the compiler's refusal names: where it gave up, not what the update needs
        # (1.5B on one v5p chip: 98.04 GiB refused, 142 from 2- and 4-layer proxies; docs/results/tpu_compile.md)
        out.append(dict(component="gradients + activations", planner=p.gradients + p.activations,
                        compiler=refused["refused_temp_bytes"],
                        compiler_from="update temporaries (its refusal: a lower bound)"))
    if upd:
        out += [dict(component="params + optimizer state", planner=p.params + p.optimizer_state,
                     compiler=upd["memory"]["argument"] - m["batch_bytes"],
                     compiler_from="update arguments - batch"),
                dict(component="gradients + activations", planner=p.gradients + p.activations,
                     compiler=upd["memory"]["temp"], compiler_from="update temporaries")]
    if dec:
        out += [dict(component="KV cache", planner=p.kv_cache, compiler=dec["memory"]["argument"] - m["params_bytes"],
                     compiler_from="rollout decode arguments - params"),
                dict(component="sampling temporaries", planner=p.sampling_logits, compiler=dec["memory"]["temp"],
                     compiler_from="rollout decode temporaries")]
    if upd and dec:
        out.append(dict(component="peak", planner=p.peak, compiler=max(upd["peak_bytes"], dec["peak_bytes"]),
                        compiler_from="max(update, rollout decode) peak"))
    for r in out:
        r["ratio"] = r["planner"] / r["compiler"] if r["compiler"] else None
    return out


def render_planner(rows: list[dict]) -> str:
    lines = ["| component (per device) | planner GiB | compiler GiB | planner / compiler | compiler's number |",
             "|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['component']} | {r['planner'] / GiB:.3f} | {r['compiler'] / GiB:.3f} | "
                     f"{_g(r['ratio'], '.2f')} | {r['compiler_from']} |")
    return "\n".join(lines) + "\n"


def _g(x, spec: str, scale: float = 1.0) -> str:
    return "-" if x is None else format(x / scale, spec)


def render_markdown(res: dict) -> str:
    m, s = res["meta"], res["step"]
    lines = [f"## {m['config'] or 'config'} on {m['topology']} ({m['devices']} x {m['device_kind']}, "
             f"{m['hbm_gib']:g} GiB HBM each)", "",
             f"Model {m['model']} ({m['model_params'] / 1e9:.2f}B, params {m['param_dtype']}, compute {m['dtype']}"
             f"{', remat' if m['remat'] else ''}); mesh {m['mesh']}; method {m['method']} ({', '.join(m['terms'])}); "
             f"update {m['shapes']['train_rows']} rows x {m['shapes']['train_length']} tokens in "
             f"{m['shapes']['micro_batches']} micro-batches, scored={m['scored']}. Per device: params "
             f"{m['params_bytes'] / GiB:.2f} GiB, optimizer state {m['opt_state_bytes'] / GiB:.2f} GiB"
             f"{', reference params %.2f GiB' % (m['reference_params_bytes'] / GiB) if m['reference_params_bytes'] else ''}.",
             "",
             "| executable | shape | compile s | args GiB | out GiB | aliased GiB | temp GiB | code MiB | resident GiB "
             "| peak GiB | fit | analytic TFLOP | compiler TFLOP | bytes GB | roofline s | calls/step |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in res["executables"]:
        mem = r.get("memory") or {}
        fit = "FITS" if r["fits"] else ("REFUSED: " + r["compiler_refused"][:120] if r.get("compiler_refused")
                                        else "DOES NOT FIT")
        lines.append(
            f"| {r['name']} | {r['note']} | {r['compile_s']:.1f} | {_g(mem.get('argument'), '.2f', GiB)} | "
            f"{_g(mem.get('output'), '.2f', GiB)} | {_g(mem.get('alias'), '.2f', GiB)} | "
            f"{_g(mem.get('temp'), '.2f', GiB)} | {_g(mem.get('code'), '.1f', 2 ** 20)} | "
            f"{r['resident_bytes'] / GiB:.2f} | {_g(r.get('peak_bytes'), '.2f', GiB)} | {fit} | "
            f"{r['analytic_flops'] / 1e12:.3g} | {_g(r.get('compiler_flops'), '.3g', 1e12)} | "
            f"{_g(r.get('roofline_bytes'), '.3g', 1e9)} | {_g(r.get('roofline_s'), '.3g')} | {r['calls']} |")
    verdict = "FITS" if s["fits"] else "DOES NOT FIT"
    lines += ["", f"Step: peak {_g(s['peak_bytes'], '.2f', GiB)} GiB of {m['hbm_gib']:g} GiB -> **{verdict}**; "
              f"roofline step time {_g(s['roofline_s'], '.3g')} s; MFU bound {_g(s['mfu_bound'], '.1%')}; "
              f"{s['model_flops'] / 1e12:.4g} model TFLOP a step; compiled in {s['compile_s']:.0f} s.", ""]
    if any(r.get("peak_bytes") is not None and r.get("roofline_bytes") is None for r in res["executables"]):
        lines += ["This compiler gave no cost analysis (XLA's GPU compiler does not): the rows without bytes have a "
                  "FLOPs-only roofline time (still a lower bound), so the MFU bound is loose.", ""]
    if res.get("planner"):
        lines += ["Planner (`parallel.memory.plan`) against the compiler:", "", render_planner(res["planner"])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ one decode step


def decode_step_cost(cfg, device, rows: int, prompt_len: int, new_tokens: int, window: Optional[int] = None,
                     ops: bool = False) -> dict:
    """The compiler's bytes accessed and FLOPs of one step of the sampler's decode loop on one chip: the LM head on
    the last hidden state, the draw (`sampling.logits.sample_with_uniform`) and `models.qwen2.decode_step` over a
    cache of prompt_len + new_tokens slots, attending over `window` of them (None: all) -- the loop body, rebuilt
    from its parts so that its cost is counted alone (the compiler counts a while-loop's body once, beside the
    loop's prologue). The cache is donated, as the loop updates it in place. ops: also the count op by op
    (`bytes_by_op`), under "ops"."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from jaxrl_reason.models.qwen2 import KVCache, decode_layers, decode_step, init_model
    from jaxrl_reason.sampling.logits import sample_with_uniform

    mesh = Mesh(np.asarray([device]).reshape(1), ("x",))
    rep = NamedSharding(mesh, P())
    graphdef, state = nnx.split(nnx.eval_shape(lambda: init_model(cfg, 0)))
    put = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=rep), tree)  # noqa
    state = put(state)
    layers = put(jax.eval_shape(lambda s: decode_layers(nnx.merge(graphdef, s)), state))
    slots = prompt_len + new_tokens
    cache = put(jax.eval_shape(lambda: KVCache.zeros(cfg, rows, slots)))
    hidden = jax.ShapeDtypeStruct((rows, cfg.hidden_size), jnp.dtype(cfg.dtype), sharding=rep)
    vec = lambda dt: jax.ShapeDtypeStruct((rows,), dt, sharding=rep)  # noqa: E731

    def step(state, layers, hidden, uniform, positions, live, cache):
        model = nnx.merge(graphdef, state)
        s = sample_with_uniform(model.logits_from_hidden(hidden), uniform, 1.0, 1.0, 0)
        return decode_step(model, layers, s.token, positions, live, cache, window=window), s.logprob

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=(6,)).lower(state, layers, hidden, vec(jnp.float32), vec(jnp.int32),
                                                        vec(jnp.bool_), cache).compile()
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    out = dict(window=window or slots, compile_s=time.perf_counter() - t0, bytes=float(cost.get("bytes accessed", 0)),
               flops=float(cost.get("flops", 0)))
    if ops:
        out["ops"] = bytes_by_op(compiled.as_text())
    return out


# ---- the compiler's bytes accessed, op by op (docs/results/tpu_compile.md, "what the decode step's bytes are")
_FREE_OPS = {"parameter", "get-tuple-element", "bitcast", "tuple", "constant", "after-all"}
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*)$")


def _hlo_blocks(text: str) -> list[list[str]]:
    blocks, cur = [], None
    for line in text.splitlines():
        if not line.startswith(" ") and line.rstrip().endswith("{") and not line.startswith("HloModule"):
            cur = [line]
        elif cur is not None:
            cur.append(line)
            if line.startswith("}"):
                blocks.append(cur)
                cur = None
    return blocks


def _split_top(s: str, sep: str = ",") -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def _instructions(block: list[str]) -> list[dict]:
    out = []
    for line in block[1:-1]:
        m = _INSTR.match(line)
        if not m:
            continue
        rest = m.group(2)
        shape = _split_top(rest, " ")[0]
        tail = rest[len(shape) + 1:]
        op = re.match(r"([\w\-]+)\(", tail).group(1)
        depth = 0
        for end in range(len(op), len(tail)):
            depth += tail[end] == "("
            depth -= tail[end] == ")"
            if depth == 0:
                break
        out.append(dict(name=m.group(1), shape=shape, op=op, args=tail[len(op) + 1:end], attrs=tail[end + 1:]))
    return out


def _in_vmem(shape: str, index: str) -> bool:
    """Whether the buffer at `index` ("" or "k,...") of an HLO shape string lives in memory space 1 (a TPU's VMEM,
    on the chip: reading or writing it moves no HBM bytes)."""
    if shape.startswith("(") and index:
        shape = _split_top(shape[1:-1])[int(index.split(",")[0])]
    return "S(1)" in (shape if shape.startswith("(") else shape.split("}")[0])


def bytes_by_op(hlo_text: str) -> list[dict]:
    """The compiler's bytes accessed of an optimized HLO module's entry computation, op by op: each top-level
    instruction costed alone by XLA's HloCostAnalysis (its operands as parameters; an async done beside its start,
    less the start), so the rows sum to the module's own count. Per row also `hbm_bytes`: the same count without
    the operands and outputs the compiler placed in on-chip memory (memory space 1), and without an async move's
    destination and done -- what the analysis bills for a prefetch into VMEM beyond the one HBM read it is."""
    import jax
    from jax._src.lib import _jax
    from jaxlib import _hlo

    client = jax.devices("cpu")[0].client
    blocks = _hlo_blocks(hlo_text)
    entry = next(b for b in blocks if b[0].startswith("ENTRY"))
    called = "\n".join("\n".join(b) for b in blocks if b is not entry)
    ins = _instructions(entry)
    shapes, by_name = {i["name"]: i["shape"] for i in ins}, {i["name"]: i for i in ins}
    clean = lambda a: re.sub(r",?\s*(control-predecessors=\{[^}]*\}|stack_frame_id=\d+)", "", a)  # noqa: E731

    def cost(i, done=None):
        names = list(dict.fromkeys(re.findall(r"%([\w.\-]+)", i["args"])))
        lines, args = [], i["args"]
        for n, name in enumerate(names):
            lines.append(f"  %p{n} = {shapes[name]} parameter({n})")
            args = re.sub(rf"%{re.escape(name)}(?![\w.\-])", f"%p{n}", args)
        root = f"{i['shape']} {i['op']}({args}){clean(i['attrs'])}"
        lines += [f"  ROOT %r = {root}"] if done is None else [
            f"  %s = {root}", f"  ROOT %r = {done['shape']} {done['op']}(%s){clean(done['attrs'])}"]
        module = f"HloModule one\n\n{called}\n\nENTRY %e {{\n" + "\n".join(lines) + "\n}\n"
        return _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(module))

    rows = []
    for i in ins:
        if i["op"] in _FREE_OPS:
            continue
        operands = [shapes[n] for n in re.findall(r"%([\w.\-]+)", i["args"])]
        if i["op"].endswith("-done"):
            start = by_name[re.findall(r"%([\w.\-]+)", i["args"])[0]]
            pair, alone = cost(start, done=i), cost(start)
            c = {k: pair.get(k, 0.0) - alone.get(k, 0.0) for k in pair}
        else:
            c = cost(i)
        hbm = 0.0
        for key, v in c.items():
            m = re.match(r"bytes accessed(\d+|out)\{([\d,]*)\}$", key)
            if not m or i["op"].endswith("-done") or (m.group(1) == "out" and i["op"].endswith("-start")):
                continue
            if m.group(1) == "out":
                hbm += 0.0 if _in_vmem(i["shape"], m.group(2)) else v
            else:
                k = int(m.group(1))
                hbm += v if k >= len(operands) or not _in_vmem(operands[k], m.group(2)) else 0.0
        meta = re.search(r'op_name="([^"]*)"', i["attrs"])
        rows.append(dict(name=i["name"], op=i["op"], shape=i["shape"], operands=operands,
                         meta=meta.group(1) if meta else "", bytes=float(c.get("bytes accessed", 0.0)),
                         hbm_bytes=hbm))
    return rows


# ---- the batch and model a launch config plans for (experiments/launch/preflight.py)
def model_config(cfg):
    """(the ModelConfig a run's ConfigDict trains, where it comes from): a checkpoint's config.json, the
    from-scratch model of the config's own fields, or a preset named by the path (experiments/launch/preflight.py)."""
    from jaxrl_reason.models import presets

    dtype, compute = cfg.model.dtype, cfg.model.compute_dtype or cfg.model.dtype
    path = cfg.model.hf_path
    if path and os.path.isfile(os.path.join(path, "config.json")):
        return presets.load_model_config(path, dtype, compute), path
    if not path and not cfg.model.get("gguf_path"):  # the from-scratch model of the config's own fields
        from jaxrl_reason.models.qwen2 import ModelConfig

        m = cfg.model
        return ModelConfig(vocab_size=cfg.tokenizer.vocab_size, hidden_size=m.hidden_size,
                           intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
                           num_attention_heads=m.num_attention_heads, num_key_value_heads=m.num_key_value_heads,
                           max_position_embeddings=m.max_position_embeddings,
                           tie_word_embeddings=m.tie_word_embeddings, param_dtype=dtype, dtype=compute), "from scratch"
    name = os.path.basename(os.path.normpath(path)).lower() if path else ""
    if name in presets.PRESETS:
        return presets.load_model_config(name, dtype, compute), f"preset {name}"
    raise SystemExit(f"preflight: model.hf_path={path!r} has no config.json here and its name matches no preset "
                     f"({', '.join(presets.PRESETS)}); pass a config with the weights on disk")


def batch_settings(cfg, shards: int):
    """The memory planner's BatchSettings of a run's ConfigDict on `shards` batch shards: its planned batch
    (parallel.plan), else its rollouts (twice the rows for RL^V), padded as the trainer pads them."""
    from jaxrl_reason.parallel.memory import BatchSettings

    r, p = cfg.rl, cfg.parallel
    rows_multiple = r.micro_batches * shards  # the trainer pads every update to whole micro-batches per shard
    plan = p.get("plan")
    if plan is not None:
        train_rows, sample_rows, context = plan.train_rows, plan.sample_rows, plan.context
    else:
        rollouts = r.prompts_per_step * r.samples_per_prompt
        train_rows = rollouts * (2 if cfg.method.name == "rlv" else 1)
        sample_rows, context = rollouts, r.max_new_tokens + p.get("prompt_tokens", 256)
    train_rows = -(-train_rows // rows_multiple) * rows_multiple
    sample_rows = -(-sample_rows // shards) * shards
    return BatchSettings(train_rows, context, sample_rows, context, r.micro_batches, r.get("logprob_chunk") or None)
