"""Tool-integrated reasoning with the sandboxed Python tool, Qwen2.5-Math-1.5B (accelerators).

The preset itself, with its notes and commands: jaxrl_reason/configs/tir_qwen25_math_1p5b.py."""
from jaxrl_reason.configs.tir_qwen25_math_1p5b import get_config  # noqa: F401
