"""The Trainer in two OS processes joined by `jax.distributed` (2 CPU devices each, gloo collectives) on one global
(data=2, fsdp=2) mesh; run by tests/test_parallel_train.py, which compares it with one process holding 4 devices.

    python tests/parallel_train_multiprocess.py worker PROCESS_ID NUM_PROCESSES PORT TOKENIZER_DIR OUT_DIR
    python tests/parallel_train_multiprocess.py single TOKENIZER_DIR OUT_DIR

Every process writes `scored_<process>.json` (how many completions it graded); the run's own files (metrics,
checkpoints) are whatever the Trainer wrote.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl_reason.parallel import mesh as pmesh  # noqa: E402
from jaxrl_reason.parallel.rules import path_str  # noqa: E402


def run(tokenizer_dir: str, out_dir: str):
    from jaxrl_reason.data.arithmetic import arithmetic_examples
    from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
    from jaxrl_reason.parallel.mesh import to_host
    from jaxrl_reason.tokenization import Tokenizer
    from jaxrl_reason.train.trainer import Trainer, TrainerConfig

    from parallel_train_checks import KEYS, reward_fn
    from tiny import ARITH, tiny_model

    scored = []

    def counting_reward(texts, examples):
        scored.append(len(texts))
        return reward_fn(texts, examples)

    tokenizer = Tokenizer.from_pretrained(tokenizer_dir)
    mesh = pmesh.make_mesh({"data": 2, "fsdp": 2, "tp": 1})
    cfg = TrainerConfig(steps=2, prompts_per_step=4, samples_per_prompt=2, max_new_tokens=8, lr=1e-3,
                        checkpoint_every=1, progress=False, seed=5)
    tr = Trainer(tiny_model(tokenizer, seed=3), tokenizer, GRPO("grpo", PolicyLossConfig(beta=0.05)),
                 arithmetic_examples(64, seed=7, config=ARITH), counting_reward, cfg, os.path.join(out_dir, "run"),
                 mesh=mesh)
    history = [{k: float(m[k]) for k in KEYS if k in m} for m in tr.run()]
    # every process joins the gathers; only process 0 keeps the result
    params = {path_str(kp): to_host(x) for kp, x in jax.tree_util.tree_leaves_with_path(tr.state.params)}
    tr.close()
    with open(os.path.join(out_dir, f"scored_{jax.process_index()}.json"), "w") as f:
        json.dump({"scored": scored}, f)
    if pmesh.is_main_process():
        np.savez(os.path.join(out_dir, "params.npz"), **params)
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"history": history, "process_count": jax.process_count(),
                       "device_count": jax.device_count()}, f)


if __name__ == "__main__":
    if MODE == "worker":
        pid, nproc, port, tok_dir, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
        pmesh.initialize_distributed(f"localhost:{port}", nproc, pid, cpu_collectives="gloo")
        assert jax.process_count() == nproc and jax.device_count() == nproc * LOCAL_DEVICES
    else:
        tok_dir, out = sys.argv[2], sys.argv[3]
    run(tok_dir, out)
    if MODE == "worker":
        jax.distributed.shutdown()
