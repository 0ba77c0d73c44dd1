"""Dr. GRPO (Liu et al.).

The preset itself, with its notes and commands: jaxrl_reason/configs/dr_grpo.py."""
from jaxrl_reason.configs.dr_grpo import get_config  # noqa: F401
