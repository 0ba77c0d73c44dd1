"""GRPO^V on the CPU default task.

The preset itself, with its notes and commands: jaxrl_reason/configs/rlv.py."""
from jaxrl_reason.configs.rlv import get_config  # noqa: F401
