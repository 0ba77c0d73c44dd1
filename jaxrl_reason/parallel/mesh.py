"""Device meshes with named axes, built from a config, and multi-host start-up.

Three axes, always present (size 1 when unused), so partition rules never depend on the mesh shape:

    data  pure data parallelism: parameters replicated, batch rows split
    fsdp  fully-sharded data parallelism: batch rows split *and* parameters / optimizer state split
    tp    tensor parallelism: attention heads, MLP hidden units and the vocabulary split

JAX's SPMD partitioner does the rest: arrays are placed on `NamedSharding`s and `jax.jit` inserts the
collectives. Across hosts the same code runs in every process after `initialize_distributed()`.
"""
from __future__ import annotations

import functools
import math
import os
import pickle
from typing import Mapping, Optional, Sequence, Union

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tp")
BATCH_AXES = ("data", "fsdp")  # batch rows are split over both data-parallel axes

MeshShape = Union[Mapping[str, int], Sequence[int]]


def resolve_mesh_shape(mesh_shape: MeshShape, num_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tp) sizes from a dict like {"data": 2, "fsdp": -1, "tp": 2} or a 3-sequence.

    Missing axes are 1; at most one axis may be -1 ("all remaining devices"). The product must equal
    `num_devices`.
    """
    if isinstance(mesh_shape, Mapping):
        unknown = sorted(set(mesh_shape) - set(AXES))
        if unknown:
            raise ValueError(f"mesh_shape has unknown axis name(s) {unknown}; the axes are {AXES}")
        sizes = [int(mesh_shape.get(a, 1)) for a in AXES]
    else:
        sizes = [int(s) for s in mesh_shape]
        if len(sizes) != len(AXES):
            raise ValueError(f"mesh_shape as a sequence needs {len(AXES)} sizes {AXES}, got {list(mesh_shape)}")
    for a, s in zip(AXES, sizes):
        if s == 0 or s < -1:
            raise ValueError(f"mesh_shape.{a} must be a positive size or -1 (the rest), got {s}")
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1:
        raise ValueError(f"mesh_shape may use -1 for at most one axis, got {dict(zip(AXES, sizes))}")
    known = math.prod(s for s in sizes if s != -1)
    if free:
        if num_devices % known:
            raise ValueError(f"mesh_shape {dict(zip(AXES, sizes))}: the fixed axes ({known} devices) do not divide "
                             f"the {num_devices} available devices")
        sizes[free[0]] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ValueError(f"mesh_shape {dict(zip(AXES, sizes))} covers {math.prod(sizes)} devices but "
                         f"{num_devices} are available; set one axis to -1 to take the rest")
    return tuple(sizes)


def make_mesh(mesh_shape: MeshShape = None, devices: Optional[Sequence] = None) -> Mesh:
    """A ("data", "fsdp", "tp") mesh over `devices` (default: every device of every process).

    `mesh_shape=None` means pure data parallelism over all devices. On real hardware the device order comes
    from `jax.experimental.mesh_utils` so that `tp` (the chattiest axis) maps to the fastest interconnect.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = resolve_mesh_shape({"data": -1} if mesh_shape is None else mesh_shape, len(devices))
    if devices and devices[0].platform in ("tpu", "gpu", "cuda", "rocm") and len(devices) == jax.device_count():
        from jax.experimental import mesh_utils

        try:
            grid = mesh_utils.create_device_mesh(sizes, devices=devices)
        except (ValueError, NotImplementedError, AssertionError):
            grid = np.asarray(devices).reshape(sizes)
    else:
        grid = np.asarray(devices, dtype=object).reshape(sizes)
    return Mesh(grid, AXES)


def mesh_from_config(config) -> Mesh:
    """From a ConfigDict / dict with an optional `mesh_shape` field (e.g. `config.parallel`)."""
    shape = None
    if config is not None:
        shape = config.get("mesh_shape", None) if hasattr(config, "get") else getattr(config, "mesh_shape", None)
    if shape is not None and hasattr(shape, "to_dict"):
        shape = shape.to_dict()
    return make_mesh(shape)


def axis_size(mesh: Mesh, axes) -> int:
    """Number of shards along one axis name, a tuple of names, or None."""
    if axes is None:
        return 1
    if isinstance(axes, str):
        return mesh.shape[axes]
    return math.prod(mesh.shape[a] for a in axes)


def batch_shards(mesh: Mesh) -> int:
    return axis_size(mesh, BATCH_AXES)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


# ----------------------------------------------------------------------------------------------------------
# Multi-host


_ENV = {
    "coordinator_address": ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS"),
    "num_processes": ("JAX_NUM_PROCESSES", "NUM_PROCESSES"),
    "process_id": ("JAX_PROCESS_ID", "PROCESS_ID"),
    "local_device_ids": ("JAX_LOCAL_DEVICE_IDS",),
}


def _from_env(name):
    for var in _ENV[name]:
        if os.environ.get(var):
            return os.environ[var]
    return None


def initialize_distributed(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
                           process_id: Optional[int] = None, *, local_device_ids: Optional[Sequence[int]] = None,
                           cpu_collectives: Optional[str] = None, auto: bool = False) -> bool:
    """Join the processes of a multi-host run with `jax.distributed.initialize`; returns True if joined.

    Arguments win over the environment (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID,
    JAX_LOCAL_DEVICE_IDS). With nothing given: `auto=True` lets JAX detect the cluster (TPU pods, SLURM,
    Open MPI); otherwise this is a single-process run and nothing happens. Must run before any other JAX call
    that touches devices. `cpu_collectives="gloo"` enables cross-process collectives on CPU (tests).
    """
    coordinator_address = coordinator_address or _from_env("coordinator_address")
    num_processes = num_processes if num_processes is not None else _from_env("num_processes")
    process_id = process_id if process_id is not None else _from_env("process_id")
    if local_device_ids is None and _from_env("local_device_ids"):
        local_device_ids = [int(x) for x in _from_env("local_device_ids").split(",")]
    if coordinator_address is None and not auto:
        if num_processes is not None and int(num_processes) > 1:
            raise ValueError(f"num_processes={num_processes} but no coordinator address: pass "
                             "coordinator_address='host:port' or set JAX_COORDINATOR_ADDRESS")
        return False
    if coordinator_address is not None and (num_processes is None or process_id is None):
        raise ValueError("with a coordinator address, num_processes and process_id are needed too "
                         "(arguments or JAX_NUM_PROCESSES / JAX_PROCESS_ID)")
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    kw = {}
    if coordinator_address is not None:
        kw = dict(coordinator_address=coordinator_address, num_processes=int(num_processes),
                  process_id=int(process_id))
    if local_device_ids is not None:
        kw["local_device_ids"] = list(local_device_ids)
    jax.distributed.initialize(**kw)
    return True


def is_main_process() -> bool:
    """Only process 0 writes metrics, logs and host-side files; every process joins checkpoint saves."""
    return jax.process_index() == 0


def process_rows(global_rows: int, mesh: Mesh) -> slice:
    """The contiguous slice of a global batch's rows whose shards live on this process's devices.

    The batch is split over ("data", "fsdp"); each process owns the rows of its addressable batch shards. A
    process loads (tokenises, samples, scores) only these rows, then `global_batch_from_local` assembles them.
    """
    n = batch_shards(mesh)
    if global_rows % n:
        raise ValueError(f"global batch of {global_rows} rows does not divide over {n} batch shards "
                         f"(data x fsdp = {mesh.shape['data']} x {mesh.shape['fsdp']})")
    sharding = NamedSharding(mesh, P(BATCH_AXES))
    idx = sharding.addressable_devices_indices_map((global_rows,))
    starts = sorted({(s[0].start or 0) for s in idx.values()})
    stops = sorted({(s[0].stop if s[0].stop is not None else global_rows) for s in idx.values()})
    lo, hi = starts[0], stops[-1]
    if hi - lo != len(starts) * (global_rows // n):
        raise ValueError("this process's batch shards are not contiguous on the mesh; build the mesh with "
                         "make_mesh() so that each process owns a contiguous block of the data axes")
    return slice(lo, hi)


def process_share(n: int) -> slice:
    """This process's contiguous share of `n` host-side work items (reward scoring), as equal as possible; all of
    them in a single-process run."""
    count, index = jax.process_count(), jax.process_index()
    per = -(-n // count)
    return slice(min(index * per, n), min((index + 1) * per, n))


def allgather_objects(local: Sequence) -> list:
    """Every process's `local` list (any picklable items), concatenated in process order, on every process.

    For host results of `process_share` work: reward scores and their detail dicts. Two small collectives
    (sizes, then the padded pickles); a single-process run makes none.
    """
    if jax.process_count() == 1:
        return list(local)
    from jax.experimental import multihost_utils

    blob = np.frombuffer(pickle.dumps(list(local)), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.array([blob.size], np.int64))).reshape(-1)
    buf = np.zeros((int(sizes.max()),), np.uint8)
    buf[:blob.size] = blob
    everyone = np.asarray(multihost_utils.process_allgather(buf)).reshape(len(sizes), -1)
    out = []
    for row, size in zip(everyone, sizes):
        out.extend(pickle.loads(row[:int(size)].tobytes()))
    return out


def to_host(x) -> np.ndarray:
    """The whole value of an array as numpy on every process. An array spread over several processes' devices
    is gathered first (every process must make the same call); a local one is simply copied."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


@functools.lru_cache(maxsize=None)
def one_device_mesh() -> Mesh:
    """The mesh of a run on one device: every axis of size 1 over this process's first device. One device is not
    a special case anywhere (trainer, warm-ups, sampler, evaluation): it is this mesh."""
    return make_mesh({"data": 1, "fsdp": 1, "tp": 1}, devices=jax.local_devices()[:1])


def resolve_mesh(mesh: Optional[Mesh], like=None) -> Mesh:
    """`mesh`; when a caller gives none, the mesh the arrays of `like` (e.g. params) are laid out on, else the
    one-device mesh."""
    if mesh is not None:
        return mesh
    for leaf in jax.tree.leaves(like):
        if isinstance(leaf, jax.Array):
            return leaf.sharding.mesh if isinstance(leaf.sharding, NamedSharding) else one_device_mesh()
    return one_device_mesh()


def run_mesh(config) -> Mesh:
    """`mesh_from_config`, except that no `mesh_shape`, or one that resolves to a single device, is the one-device
    mesh (a run config without a `parallel` section trains on one device, not on all of them)."""
    shape = None
    if config is not None:
        shape = config.get("mesh_shape", None) if hasattr(config, "get") else getattr(config, "mesh_shape", None)
    if shape is None:
        return one_device_mesh()
    if hasattr(shape, "to_dict"):
        shape = shape.to_dict()
    if math.prod(resolve_mesh_shape(shape, jax.device_count()) if _has_free_axis(shape) else _fixed(shape)) == 1:
        return one_device_mesh()
    return make_mesh(shape)


def _fixed(shape) -> list[int]:
    return [int(v) for v in (shape.values() if isinstance(shape, Mapping) else shape)]


def _has_free_axis(shape) -> bool:
    return -1 in _fixed(shape)
