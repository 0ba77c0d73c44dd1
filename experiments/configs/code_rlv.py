"""GRPO^V on code for the CPU default.

The preset itself, with its notes and commands: jaxrl_reason/configs/code_rlv.py."""
from jaxrl_reason.configs.code_rlv import get_config  # noqa: F401
