"""Bytes a decode step reads, as the TPU compiler counts them, against the roofline's (every parameter once and the
valid KV cache once), before and after the sampler's window phases (`sampling.sampler.decode_windows`).

    python experiments/bench/decode_bytes_tpu.py [--model qwen2.5-math-1.5b] [--rows 64] [--prompt 512] \
        [--new 1024,4096] [--topology v5e:2x2] [--phases 4] [--ops] [--out runs/decode_bytes_tpu]

One step of the decode loop (`experiment.compile_check.decode_step_cost`) is compiled for one chip of the topology
(libtpu, no TPU) over the full cache (before: every step attends over every slot), and over each phase's window
(after: the steps of a phase attend over its window); "after" is the mean over steps. Roofline bytes per step:
parameters in the compute dtype + the KV cache at the mean context prompt + (new + 1) / 2
(`parallel.roofline.decode_bytes`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-math-1.5b", help="a preset of jaxrl_reason.models.presets")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", default="1024,4096")
    ap.add_argument("--topology", default="v5e:2x2")
    ap.add_argument("--phases", type=int, default=None, help="default: sampler.WINDOW_PHASES")
    ap.add_argument("--ops", action="store_true", help="also cost each step op by op (compile_check.bytes_by_op): "
                    "the HBM count beside the billed one; minutes per step on 2 cores")
    ap.add_argument("--out", default="runs/decode_bytes_tpu")
    args = ap.parse_args(argv)
    import math

    import numpy as np

    from jaxrl_reason.experiment.compile_check import decode_step_cost, topology_devices
    from jaxrl_reason.models.presets import load_model_config
    from jaxrl_reason.parallel.roofline import decode_bytes, kv_bytes
    from jaxrl_reason.sampling.sampler import WINDOW_PHASES, decode_windows

    phases = args.phases or WINDOW_PHASES

    def hbm(cost):  # the op rows summed (kept out of the JSON: thousands of them)
        ops = cost.pop("ops", None)
        if ops is not None:
            cost["hbm_bytes"] = sum(r["hbm_bytes"] for r in ops)
            cost["op_sum_bytes"] = sum(r["bytes"] for r in ops)
        return cost
    cfg = load_model_config(args.model, args.dtype, args.dtype)
    device = topology_devices(args.topology)[0]
    item = np.dtype(args.dtype).itemsize if args.dtype != "bfloat16" else 2
    param_bytes = cfg.num_params() * item
    rows = []
    for new in [int(x) for x in args.new.split(",")]:
        roof = decode_bytes(cfg, args.rows, args.prompt, new, param_bytes, item)
        slots = args.prompt + new
        full = hbm(decode_step_cost(cfg, device, args.rows, args.prompt, new, ops=args.ops))
        windows = decode_windows(slots, new, phases)
        costs = [(stop - start, hbm(decode_step_cost(cfg, device, args.rows, args.prompt, new, w, ops=args.ops))
                  if w else full) for start, stop, w in windows]
        after = sum(n * c["bytes"] for n, c in costs) / new
        row = dict(model=args.model, rows=args.rows, prompt=args.prompt, new=new, slots=slots,
                   roofline_bytes=roof["bytes_per_step"], param_bytes=param_bytes,
                   kv_valid_mean=roof["kv_bytes_per_step"], kv_all_slots=kv_bytes(cfg, args.rows, slots, item),
                   before_bytes=full["bytes"], after_bytes=after, before_ratio=full["bytes"] / roof["bytes_per_step"],
                   after_ratio=after / roof["bytes_per_step"],
                   phases=[dict(steps=n, **c) for n, c in costs])
        if args.ops:
            row.update(before_hbm_bytes=full["hbm_bytes"], after_hbm_bytes=sum(n * c["hbm_bytes"] for n, c in costs) / new)
            row.update(before_hbm_ratio=row["before_hbm_bytes"] / row["roofline_bytes"],
                       after_hbm_ratio=row["after_hbm_bytes"] / row["roofline_bytes"])
            print(f"new {new}: HBM count (VMEM prefetches once) before {row['before_hbm_bytes'] / 1e9:.3f} GB "
                  f"({row['before_hbm_ratio']:.2f}x), after {row['after_hbm_bytes'] / 1e9:.3f} GB "
                  f"({row['after_hbm_ratio']:.2f}x)", flush=True)
        rows.append(row)
        print(f"new {new}: roofline {row['roofline_bytes'] / 1e9:.3f} GB/step; compiler before "
              f"{row['before_bytes'] / 1e9:.3f} GB ({row['before_ratio']:.2f}x), after {after / 1e9:.3f} GB "
              f"({row['after_ratio']:.2f}x); compile s {[round(c['compile_s']) for _, c in costs]}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_bytes_tpu.json"), "w") as f:
        json.dump(dict(argv=sys.argv[1:] if argv is None else argv, topology=args.topology,
                       device_kind=device.device_kind, rows=rows), f, indent=2)
    assert all(math.isfinite(r["after_ratio"]) for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
