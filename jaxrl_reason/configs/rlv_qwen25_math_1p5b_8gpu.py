"""RL^V (GRPO^V), Qwen2.5-Math-1.5B, on one host with 8 GPUs: parameters and optimizer state fully sharded
over all 8 devices (fsdp=8), batch rows split the same way.

Pre-flight (peak ~20 GiB of 80 GiB per device, see `parallel.memory`):
    python experiments/plan_memory.py --model qwen2.5-math-1.5b --mesh fsdp=8 --train-rows 320 \
        --train-length 1024 --micro-batches 8 --sample-rows 160 --sample-length 1024 --device-memory-gb 80
Launch: experiments/launch/run.sh jaxrl_reason/configs/rlv_qwen25_math_1p5b_8gpu.py [--config.x=y ...]
"""
from jaxrl_reason.configs import fsdp_over_devices
from jaxrl_reason.configs.rlv_qwen25_math_1p5b import get_config as base


def get_config():
    c = base()
    c.workdir = "runs/rlv_qwen25_math_1p5b_8gpu"
    c.rl.micro_batches = 8  # 40 rows a micro-batch, 5 per device (the one-device preset needs 20)
    c.parallel = fsdp_over_devices(80)  # one process drives all 8 local GPUs
    return c
