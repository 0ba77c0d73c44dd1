"""GRPO (Shao et al.).

The preset itself, with its notes and commands: jaxrl_reason/configs/grpo.py."""
from jaxrl_reason.configs.grpo import get_config  # noqa: F401
