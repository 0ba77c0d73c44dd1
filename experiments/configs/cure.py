"""CURE on the CPU default task.

The preset itself, with its notes and commands: jaxrl_reason/configs/cure.py."""
from jaxrl_reason.configs.cure import get_config  # noqa: F401
