"""RL^V (GRPO^V), Qwen2.5-Math-1.5B, on one host with 8 GPUs.

The preset itself, with its notes and commands: jaxrl_reason/configs/rlv_qwen25_math_1p5b_8gpu.py."""
from jaxrl_reason.configs.rlv_qwen25_math_1p5b_8gpu import get_config  # noqa: F401
