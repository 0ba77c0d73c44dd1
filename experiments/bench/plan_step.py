"""The memory planner's per-device components for one RL step of a run config on a topology's mesh: the same
model, mesh and batch that `experiments/launch/compile_tpu.py` compiles (`experiment.compile_check`), without
compiling, so its numbers sit beside the compiler's in docs/results/tpu_compile.md.

    python experiments/bench/plan_step.py --config jaxrl_reason/configs/cure_qwen25_7b_4gpu.py --topology v5e:4x4 \
        [--layers 2] [--config.rl.micro_batches=24 ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--topology", required=True)
    ap.add_argument("--layers", type=int, default=None, help="the proxy depth compile_tpu.py --layers compiles")
    args, overrides = ap.parse_known_args(argv)
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment import compile_check as cc
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.parallel.memory import GiB

    rc = read_run_config(load_config_file(args.config, overrides))
    mesh = cc.topology_mesh(dict(rc.parallel.mesh_shape), cc.topology_devices(args.topology))
    cfg, source = cc.proxy_depth(*cc.run_model_config(rc), args.layers)
    _, info = cc.step_executables(rc, cfg, mesh)
    p = cc.step_plan(rc, cfg, {a: int(v) for a, v in mesh.shape.items()}, info)
    out = {"config": os.path.basename(args.config), "topology": args.topology, "overrides": overrides,
           "model": source, "layers": cfg.num_hidden_layers, "mesh": dict(mesh.shape),
           "GiB": {"params + optimizer state": (p.params + p.optimizer_state) / GiB,
                   "gradients": p.gradients / GiB, "activations": p.activations / GiB,
                   "gradients + activations": (p.gradients + p.activations) / GiB, "KV cache": p.kv_cache / GiB,
                   "sampling temporaries": p.sampling_logits / GiB, "peak": p.peak / GiB}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
