"""Per-device work of the fused GRPO update, as the compiler sees it: one device against N devices split over
`data` or `fsdp`, compiled ahead of time (nothing runs), for TPU devices through libtpu or simulated CPU devices.

    pip install "jax[tpu]==0.10.2"   # the TPU compiler on a CPU machine (libtpu 0.0.42.1)
    python experiments/bench/parallel_work.py --topology v5e:2x2 --shape 0.5b --rows 8x8 --lengths 256,512 \
        --micro-batches 4 --meshes one,data,fsdp
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python experiments/bench/parallel_work.py --shape tiny \
        --rows 16x4 --lengths 16,16 --micro-batches 4

Prints one JSON line per mesh: the compiler's FLOPs per device (a loop body counted once: compare at equal
micro-batches only), temporaries, arguments, and whether it fits the chip's HBM (`RESOURCE_EXHAUSTED`: the compiler
refused it; the bytes it named are printed). The batch is `accelerator.py`'s GRPO batch
(`experiment.perf.grpo_batch`); the mesh, rules and update are the ones a launch uses.
"""
from __future__ import annotations

import argparse
import json
import re
import time

import jax
import numpy as np
from flax import nnx

from jaxrl_reason.experiment import perf  # noqa: E402
from jaxrl_reason.models.qwen2 import init_model  # noqa: E402
from jaxrl_reason.parallel.mesh import make_mesh  # noqa: E402
from jaxrl_reason.parallel.rules import DEFAULT_RULES, tree_shardings  # noqa: E402
from jaxrl_reason.rl.batch import scored_size  # noqa: E402
from jaxrl_reason.rl.losses import pg_spec  # noqa: E402
from jaxrl_reason.train.state import make_optimizer  # noqa: E402
from jaxrl_reason.train.update import make_sharded_update  # noqa: E402


def compile_update(cfg, devices, axis: str, prompts: int, samples: int, prompt_len: int, completion_len: int,
                   micro_batches: int) -> dict:
    graphdef, params = nnx.split(nnx.eval_shape(lambda: init_model(cfg, 0)))
    mesh = make_mesh({axis: -1}, devices=devices)
    sds = lambda t, sh: jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), t, sh)  # noqa
    params = sds(params, tree_shardings(params, mesh, DEFAULT_RULES))
    opt = make_optimizer(1e-6, total_steps=1000)
    abstract_opt = jax.eval_shape(opt.init, params)
    opt_state = sds(abstract_opt, tree_shardings(abstract_opt, mesh, DEFAULT_RULES))
    batch, _, _ = perf.grpo_batch(cfg, prompts, samples, prompt_len, completion_len,
                                         micro_batches * len(devices), share=False)
    scored = scored_size(batch, micro_batches, len(devices))
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype), batch)
    update, *_ = make_sharded_update(graphdef, opt, (pg_spec(("solve",), aggregation="seq_mean_token_mean"),),
                                     mesh, params, opt_state, batch, micro_batches=micro_batches)
    t0 = time.perf_counter()
    try:
        compiled = update.lower(params, opt_state, batch, scored).compile()
    except Exception as e:  # the TPU compiler refuses a program that does not fit, naming the bytes
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return {"fits": False, "refusal": re.sub(r"\s+", " ", str(e))[:300]}
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    mem = compiled.memory_analysis()
    hlo = compiled.as_text()
    return {"fits": True, "compile_s": round(time.perf_counter() - t0, 1), "flops": float(cost["flops"]),
            "temp_gib": mem.temp_size_in_bytes / 2**30, "argument_gib": mem.argument_size_in_bytes / 2**30,
            "all_gathers": hlo.count(" all-gather("), "all_reduces": hlo.count(" all-reduce("),
            "reduce_scatters": hlo.count(" reduce-scatter(")}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="", help="a TPU topology (v5e:2x2, v5e:4x4, ...); empty: this host's "
                    "devices (simulate N CPU devices with XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    ap.add_argument("--shape", default="tiny", help=f"model shape of accelerator.py: {sorted(perf.SHAPES)}")
    ap.add_argument("--param-dtype", default="float32")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rows", default="16x4", help="prompts x samples")
    ap.add_argument("--lengths", default="16,16", help="prompt,completion tokens")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--devices", type=int, default=4, help="devices of the sharded meshes")
    ap.add_argument("--meshes", default="one,data,fsdp", help="one (a single device), data, fsdp")
    args = ap.parse_args(argv)
    if args.topology:
        from jax.experimental import topologies

        devices = list(topologies.get_topology_desc(topology_name=args.topology, platform="tpu").devices)
    else:
        devices = jax.devices()
    if len(devices) < args.devices:
        raise SystemExit(f"--devices {args.devices}: only {len(devices)} devices here")
    prompts, samples = (int(x) for x in args.rows.split("x"))
    prompt_len, completion_len = (int(x) for x in args.lengths.split(","))
    cfg = perf.model_config(args.shape, args.param_dtype, args.dtype)
    for name in args.meshes.split(","):
        n, axis = (1, "data") if name == "one" else (args.devices, name)
        res = compile_update(cfg, devices[:n], axis, prompts, samples, prompt_len, completion_len,
                             args.micro_batches)
        print(json.dumps({"topology": args.topology or jax.default_backend(), "shape": args.shape,
                          "rows": args.rows, "lengths": args.lengths, "micro_batches": args.micro_batches,
                          "mesh": name, "devices": n, **res}), flush=True)


if __name__ == "__main__":
    main()
