"""Bytes per device for a model on a mesh, and whether it fits — before launching anything.

    python experiments/plan_memory.py --model qwen2.5-math-1.5b --mesh data=1,fsdp=8,tp=1 \
        --train-rows 160 --train-length 1024 --micro-batches 8 --sample-rows 160 --sample-length 1024 \
        --device-memory-gb 80
    python experiments/plan_memory.py --model qwen2.5-7b-instruct --mesh fsdp=16 --lora-rank 16 --kl ...
    python experiments/plan_memory.py --model /data/Qwen2.5-7B-Instruct --mesh fsdp=-1 --devices 4 ...

--model is a preset name (see --list) or a Hugging Face directory / config.json. Exit status 0 if the plan fits
(or no device memory was given), 3 if it does not.
"""
from __future__ import annotations

import argparse
import sys

from jaxrl_reason.models.lora import LoraConfig
from jaxrl_reason.models.presets import PRESETS, load_model_config
from jaxrl_reason.models.qwen2 import DECODE_WEIGHTS
from jaxrl_reason.parallel.memory import GiB, BatchSettings, parse_mesh, plan
from jaxrl_reason.parallel.rules import ShardingError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-math-1.5b")
    ap.add_argument("--list", action="store_true", help="list the model presets and exit")
    ap.add_argument("--mesh", default="fsdp=-1", help="axis sizes, e.g. data=2,fsdp=2,tp=2 (-1: the rest)")
    ap.add_argument("--devices", type=int, default=None, help="device count (needed with -1 in --mesh)")
    ap.add_argument("--param-dtype", default="float32", help="parameter (and optimizer state) dtype")
    ap.add_argument("--dtype", default="bfloat16", help="compute dtype of activations and the KV cache")
    ap.add_argument("--train-rows", type=int, required=False, default=160, help="global rows per update")
    ap.add_argument("--train-length", type=int, default=1024, help="tokens per training row")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--logprob-chunk", type=int, default=None)
    ap.add_argument("--sample-rows", type=int, default=0, help="global rows decoded together")
    ap.add_argument("--sample-length", type=int, default=0, help="prompt + new tokens while sampling")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank (0: full fine-tuning)")
    ap.add_argument("--lora-targets", default=LoraConfig.targets, help="comma-separated adapted projections")
    ap.add_argument("--decode-weights", default="gathered", choices=DECODE_WEIGHTS,
                    help="the sampler's layer weights on an fsdp mesh: gathered (every layer whole a device) or "
                    "per_layer (one layer gathered at a time)")
    ap.add_argument("--kl", action="store_true", help="a KL term reads a reference policy")
    ap.add_argument("--device-memory-gb", type=float, default=None, help="memory of one device, GiB")
    ap.add_argument("--headroom", type=float, default=0.1, help="fraction of device memory kept free")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(PRESETS))
        return 0
    try:
        cfg = load_model_config(args.model, args.param_dtype, args.dtype).replace(decode_weights=args.decode_weights)
    except ValueError as e:
        raise SystemExit(f"--{e}")
    if args.devices is None and "-1" in args.mesh:
        raise SystemExit("--mesh uses -1: pass --devices N so the remaining axis size can be resolved")
    batch = BatchSettings(args.train_rows, args.train_length, args.sample_rows, args.sample_length,
                          args.micro_batches, args.logprob_chunk)
    try:
        mesh = parse_mesh(args.mesh, args.devices)
        p = plan(cfg, mesh, batch, lora=LoraConfig(rank=args.lora_rank, alpha=2.0 * max(args.lora_rank, 1),
                                                   targets=args.lora_targets), kl=args.kl)
    except (ShardingError, ValueError) as e:
        raise SystemExit(f"plan_memory: {e}")
    device_bytes = None if args.device_memory_gb is None else args.device_memory_gb * GiB
    print(f"model {args.model}: {cfg.num_params() / 1e9:.3f}B parameters, params {args.param_dtype}, "
          f"compute {args.dtype}")
    print(p.table(device_bytes, args.headroom))
    return 0 if device_bytes is None or p.fits(device_bytes, args.headroom) else 3


if __name__ == "__main__":
    sys.exit(main())
