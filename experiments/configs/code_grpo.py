"""GRPO on code for the CPU default.

The preset itself, with its notes and commands: jaxrl_reason/configs/code_grpo.py."""
from jaxrl_reason.configs.code_grpo import get_config  # noqa: F401
