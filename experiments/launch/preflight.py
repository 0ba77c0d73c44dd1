"""Memory plan of a training config on its mesh, before anything is loaded: bytes per device for params, optimizer
state, gradients, activations and KV cache, and whether they fit `parallel.device_memory_gb`.

    python experiments/launch/preflight.py --config jaxrl_reason/configs/cure_qwen25_7b_4gpu.py [--devices 4]
    PREFLIGHT=1 experiments/launch/run.sh CONFIG.py      # the same, then the launch if it fits

The model comes from `model.hf_path`'s config.json when it is on disk, else from the preset whose name matches the
directory name (`jaxrl_reason.models.presets`: qwen2.5-7b-instruct, ...). The batch is `parallel.plan` (train_rows, sample_rows,
context) when the config has one, else Q x G rollouts (twice that for rlv's verify rows) at a context of
max_new_tokens + parallel.prompt_tokens (default 256). Exit status 0 fits (or no device memory given), 3 not.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

from jaxrl_reason.configs import load_config_file as load_config  # the config file + --config.x=y overrides
from jaxrl_reason.experiment.compile_check import batch_settings, model_config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--devices", type=int, default=None,
                    help="devices of the whole run (default: PREFLIGHT_DEVICES, else this host's JAX devices)")
    args, overrides = ap.parse_known_args(argv)
    from jaxrl_reason.parallel.memory import GiB, plan
    from jaxrl_reason.parallel.mesh import AXES, BATCH_AXES, resolve_mesh_shape
    from jaxrl_reason.parallel.rules import ShardingError

    cfg = load_config(args.config, overrides)
    from jaxrl_reason.experiment.config import read_run_config

    rc = read_run_config(cfg)  # the run's own start-up check: an unknown key fails here, before any planning
    if cfg.get("parallel") is None:
        raise SystemExit(f"preflight: {args.config} has no `parallel` section to plan for")
    devices = args.devices or int(os.environ.get("PREFLIGHT_DEVICES", 0))
    if not devices:
        import jax

        devices = jax.device_count()
    mcfg, source = model_config(cfg)
    try:
        mesh = dict(zip(AXES, resolve_mesh_shape(cfg.parallel.mesh_shape.to_dict(), devices)))
        batch = batch_settings(cfg, math.prod(mesh[a] for a in BATCH_AXES))
        # A LoRA run's adapters and their optimizer state; a KL term's reference copy (none for LoRA).
        p = plan(mcfg, mesh, batch, lora=rc.lora, kl=rc.method.loss.beta > 0)
    except (ShardingError, ValueError) as e:
        raise SystemExit(f"preflight: {e}")
    gb = cfg.parallel.get("device_memory_gb", 0) or None
    print(f"preflight {args.config}: model {source} ({mcfg.num_params() / 1e9:.2f}B), {devices} devices, {batch}")
    print(p.table(None if gb is None else gb * GiB))
    # The plan is an estimate (within 20% of the TPU compiler on 12 of 13 compiled settings, up to 21% under on the
    # 13th: docs/results/tpu_compile.md); near the limit, the compiler's own verdict is one command away.
    print(f"the compiler's own memory and fit, no accelerator needed: python experiments/launch/compile_tpu.py "
          f"--config {args.config} --topology TOPOLOGY (v5e:4x4, v5p:2x2x1, h100:8, ...)")
    return 0 if gb is None or p.fits(gb * GiB) else 3


if __name__ == "__main__":
    sys.exit(main())
