"""RL^V in the paper's setting, for accelerators.

The preset itself, with its notes and commands: jaxrl_reason/configs/rlv_qwen25_math_1p5b.py."""
from jaxrl_reason.configs.rlv_qwen25_math_1p5b import get_config  # noqa: F401
