"""Two OS processes joined by `jax.distributed` (CPU devices, gloo collectives) train a few steps on one global
mesh; run by tests/test_parallel.py, which compares them with one process holding the same global batch.

    python tests/parallel_multiprocess.py worker PROCESS_ID NUM_PROCESSES PORT OUT_DIR   (2 local devices each)
    python tests/parallel_multiprocess.py single OUT_DIR                                 (4 local devices)

Each worker builds only its own rows of the batch (`process_rows`) and only process 0 writes results.
"""
from __future__ import annotations

import json
import os
import sys

MODE = sys.argv[1]
LOCAL_DEVICES = 2 if MODE == "worker" else 4
# A collective waits for every local device thread; on a loaded 2-core machine one can lag past XLA's 40 s
# default and abort the process (seen in 2 full-suite runs here), so allow it 10 minutes.
os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={LOCAL_DEVICES} "
                           "--xla_cpu_collective_timeout_seconds=600 --xla_cpu_collective_call_terminate_timeout_seconds=600")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl_reason.parallel import mesh as pmesh  # noqa: E402
from jaxrl_reason.parallel import rules  # noqa: E402

GLOBAL_ROWS, STEPS = 8, 2
MESH = {"data": 2, "fsdp": 2, "tp": 1}  # 4 devices; with 2 processes each owns one data-parallel replica's rows


def run(out_dir: str):
    from flax import nnx
    from jax.experimental import multihost_utils

    from parallel_checks import CFG, TERMS, optimizer, toy_batch  # same toy model and batch as the 8-device run
    from jaxrl_reason.models.qwen2 import init_model
    from jaxrl_reason.train.update import make_sharded_update

    mesh = pmesh.make_mesh(MESH)
    graphdef, params = nnx.split(init_model(CFG, seed=0))  # same seed in every process: identical host values
    opt = optimizer()
    params = rules.shard_params(params, mesh)
    opt_state = rules.init_opt_state(opt, params, mesh)
    rows = pmesh.process_rows(GLOBAL_ROWS, mesh)
    # No batch example: the batch layout is one row-split sharding, whatever the (bucketed) shapes.
    update, *_ = make_sharded_update(graphdef, opt, TERMS, mesh, params, opt_state)
    history = []
    for step in range(STEPS):
        # Stand-in for a data loader that reads only this process's rows.
        local = jax.tree.map(lambda x: np.asarray(x)[rows], toy_batch(rows=GLOBAL_ROWS, seed=step + 1))
        batch = rules.global_batch_from_local(local, mesh, GLOBAL_ROWS)
        out = update(params, opt_state, batch)
        params, opt_state = out.params, out.opt_state
        history.append({k: float(v) for k, v in out.metrics.items()})
    full = multihost_utils.process_allgather(params, tiled=True)  # every process joins the gather
    if pmesh.is_main_process():
        flat = {rules.path_str(kp): np.asarray(x) for kp, x in jax.tree_util.tree_leaves_with_path(full)}
        np.savez(os.path.join(out_dir, "params.npz"), **flat)
        with open(os.path.join(out_dir, "metrics.json"), "w") as f:
            json.dump({"history": history, "process_count": jax.process_count(),
                       "device_count": jax.device_count(), "local_rows": [rows.start, rows.stop]}, f)
    else:
        with open(os.path.join(out_dir, f"rows_{jax.process_index()}.json"), "w") as f:
            json.dump({"local_rows": [rows.start, rows.stop]}, f)


if __name__ == "__main__":
    if MODE == "worker":
        pid, nproc, port, out_dir = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        pmesh.initialize_distributed(f"localhost:{port}", nproc, pid, cpu_collectives="gloo")
        assert jax.process_count() == nproc and jax.device_count() == nproc * LOCAL_DEVICES
    else:
        out_dir = sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    run(out_dir)
    if MODE == "worker":
        jax.distributed.shutdown()
