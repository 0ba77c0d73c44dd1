"""cipo_qwen3_4b_math: the preset itself, with its notes and commands: jaxrl_reason/configs/cipo_qwen3_4b_math.py."""
from jaxrl_reason.configs.cipo_qwen3_4b_math import get_config  # noqa: F401
