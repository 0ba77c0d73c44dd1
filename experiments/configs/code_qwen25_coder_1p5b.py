"""GRPO on code for accelerators.

The preset itself, with its notes and commands: jaxrl_reason/configs/code_qwen25_coder_1p5b.py."""
from jaxrl_reason.configs.code_qwen25_coder_1p5b import get_config  # noqa: F401
