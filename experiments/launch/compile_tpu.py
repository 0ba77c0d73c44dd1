"""Compile every executable of one RL step of a run config for a TPU topology, on this machine (no TPU needed):
the compiler's per-device memory against the chip's HBM, FLOPs, bytes, a roofline step time and MFU bound.

    pip install "jax[tpu]==<jax version>"        # libtpu, the TPU compiler (no TPU is touched)
    pip install jax-cuda12-plugin==<jax version>  # for GPU targets (h100:8, a100:8): the XLA GPU compiler, no GPU
    python experiments/launch/compile_tpu.py --config jaxrl_reason/configs/rlv_qwen25_math_1p5b_v5e16.py \
        --topology v5e:4x4 [--config.rl.micro_batches=40 ...] [--hbm-gb 16] [--out runs/compile_tpu]

Exit status 0 when every executable fits, 3 when one does not (the compiler's own refusal included), 2 for a
setting refused before compiling (a misspelt topology, a mesh that does not divide it, a batch that does not
divide the mesh). Writes compile_tpu.json and compile_tpu.md under --out. What is compiled and how the numbers
are read: jaxrl_reason/experiment/compile_check.py.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host runs on CPU; the topology's devices are only compiled for
# GPU topologies: the CUDA plugin's start-up check needs a driver this machine lacks (compile_check.gpu_topology_devices)
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a run config (jaxrl_reason/configs/*.py)")
    ap.add_argument("--topology", required=True, help="a TPU topology, e.g. v5e:4x4, v5p:2x2x1, v6e:2x4, or NVIDIA "
                    "GPUs, e.g. h100:8 (needs jax-cuda12-plugin, not a GPU)")
    ap.add_argument("--hbm-gb", type=float, default=None, help="HBM GiB per chip (default: the chip table's)")
    ap.add_argument("--only", default="", help="comma list of executables to compile (e.g. update,decode)")
    ap.add_argument("--layers", type=int, default=None, help="compile a proxy with this many decoder layers "
                    "(the model's other shapes kept): minutes instead of many for a 7B")
    ap.add_argument("--out", default="runs/compile_tpu", help="directory for compile_tpu.json and compile_tpu.md")
    args, overrides = ap.parse_known_args(argv)
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.compile_check import CompileCheckError, render_markdown, run_check
    from jaxrl_reason.experiment.config import read_run_config

    try:
        rc = read_run_config(load_config_file(args.config, overrides))
        res = run_check(rc, args.topology, hbm_gb=args.hbm_gb, config_name=os.path.basename(args.config),
                        only={x.strip() for x in args.only.split(",") if x.strip()} or None, layers=args.layers)
    except CompileCheckError as e:
        print(f"compile_tpu: {e}", file=sys.stderr)
        return 2
    res["meta"]["argv"] = list(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compile_tpu.json"), "w") as f:
        json.dump(res, f, indent=2)
    md = render_markdown(res)
    with open(os.path.join(args.out, "compile_tpu.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if res["step"]["fits"] else 3


if __name__ == "__main__":
    sys.exit(main())
