"""RL^V (GRPO^V), Qwen2.5-Math-1.5B, on a TPU v5e-16 slice (4 hosts x 4 chips, 16 GiB HBM each): one process per
host joined by `jax.distributed` (auto-detected on TPU), parameters and optimizer state sharded over all 16
chips, each host loading only its rows of every batch.

16 GiB per chip needs smaller micro-batches than the GPU setting (peak ~8 GiB with 20, ~20 GiB with 8):
    python experiments/plan_memory.py --model qwen2.5-math-1.5b --mesh fsdp=16 --train-rows 320 \
        --train-length 1024 --micro-batches 20 --sample-rows 160 --sample-length 1024 --device-memory-gb 16
Launch on every host at once:
    gcloud compute tpus tpu-vm ssh $TPU --worker=all --command \
        "cd jaxrl_reason && experiments/launch/run.sh jaxrl_reason/configs/rlv_qwen25_math_1p5b_v5e16.py"
"""
from jaxrl_reason.configs import fsdp_over_devices
from jaxrl_reason.configs.rlv_qwen25_math_1p5b import get_config as base


def get_config():
    c = base()
    c.workdir = "runs/rlv_qwen25_math_1p5b_v5e16"  # use a bucket or shared disk: every host writes its shards
    c.rl.micro_batches = 20
    c.parallel = fsdp_over_devices(16, distributed=True)  # every host of the pod runs one process
    return c
