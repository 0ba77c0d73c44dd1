#!/usr/bin/env bash
# Launch a training config with a `parallel` section on this host. On a multi-host slice run the same command
# on every host at once (TPU: `gcloud ... ssh --worker=all`; SLURM: `srun`); JAX finds its peers by itself
# there. Elsewhere export JAX_COORDINATOR_ADDRESS=host0:port JAX_NUM_PROCESSES=N JAX_PROCESS_ID=i per host.
#
#   experiments/launch/run.sh experiments/configs/rlv_qwen25_math_1p5b_8gpu.py [--config.rl.steps=10 ...]
set -euo pipefail
CONFIG=${1:?usage: run.sh CONFIG.py [--config.field=value ...]}
shift
cd "$(dirname "$0")/../.."

if ! grep -q "initialize_distributed" experiments/train.py || ! grep -q "config.parallel\|cfg.parallel" experiments/train.py; then
  echo "run.sh: experiments/train.py does not read config.parallel yet, so this would train unsharded on one" >&2
  echo "device; wire jaxrl_reason.parallel into train.py / Trainer first (see jaxrl_reason/parallel/rules.py)." >&2
  exit 2
fi

# GPUs: let XLA take most of the memory up front (the planner's headroom is 10%), and keep NCCL on NVLink.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
export NCCL_P2P_LEVEL=${NCCL_P2P_LEVEL:-NVL}

exec python experiments/train.py --config "$CONFIG" "$@"
