"""The preset itself, with its notes and commands: jaxrl_reason/configs/vineppo_qwen25_math_1p5b.py."""
from jaxrl_reason.configs.vineppo_qwen25_math_1p5b import get_config  # noqa: F401
