#!/usr/bin/env bash
# Launch experiments/train.py with a config that has a `parallel` section (mesh_shape, distributed).
#
# One host, all its GPUs, one process:
#   experiments/launch/run.sh jaxrl_reason/configs/rlv_qwen25_math_1p5b_8gpu.py [--config.rl.steps=10 ...]
# TPU slice (config with parallel.distributed=True): the same command on every host at once; JAX finds its peers:
#   gcloud compute tpus tpu-vm ssh $TPU --worker=all --command \
#     "cd jaxrl_reason && experiments/launch/run.sh jaxrl_reason/configs/rlv_qwen25_math_1p5b_v5e16.py"
# Several GPU hosts without a scheduler: on host i of N (host 0 runs the coordinator),
#   JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=N JAX_PROCESS_ID=i experiments/launch/run.sh CONFIG.py
# Under SLURM, `srun experiments/launch/run.sh CONFIG.py` with parallel.distributed=True.
#
# PREFLIGHT=1 first prints the memory plan of the config's mesh (experiments/plan_memory.py) and stops if it
# does not fit parallel.device_memory_gb.
set -euo pipefail
CONFIG=${1:?usage: run.sh CONFIG.py [--config.field=value ...]}
shift
cd "$(dirname "$0")/../.."
if [[ ! -f "$CONFIG" ]]; then
  echo "run.sh: no config file at $CONFIG (paths are relative to the repository root)" >&2
  exit 2
fi
PYTHON=${PYTHON:-python}

if [[ "${JAX_COORDINATOR_ADDRESS:-}" != "" && ( "${JAX_NUM_PROCESSES:-}" == "" || "${JAX_PROCESS_ID:-}" == "" ) ]]; then
  echo "run.sh: JAX_COORDINATOR_ADDRESS is set; set JAX_NUM_PROCESSES and JAX_PROCESS_ID on every host too" >&2
  exit 2
fi

# GPUs: let XLA take most of the memory up front (the planner keeps 10% headroom), keep NCCL on NVLink, and
# overlap the fsdp all-gathers / reduce-scatters with compute.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
export NCCL_P2P_LEVEL=${NCCL_P2P_LEVEL:-NVL}
if [[ "${XLA_FLAGS:-}" != *latency_hiding* ]] && command -v nvidia-smi > /dev/null 2>&1; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
fi

if [[ "${PREFLIGHT:-0}" == "1" ]]; then
  "$PYTHON" experiments/launch/preflight.py --config "$CONFIG" "$@"
fi

exec "$PYTHON" experiments/train.py --config "$CONFIG" "$@"
