"""RL^V (GRPO^V), Qwen2.5-Math-1.5B, on a TPU v5e-16 slice (4 hosts x 4 chips, 16 GiB HBM each).

The preset itself, with its notes and commands: jaxrl_reason/configs/rlv_qwen25_math_1p5b_v5e16.py."""
from jaxrl_reason.configs.rlv_qwen25_math_1p5b_v5e16 import get_config  # noqa: F401
