"""The preset itself, with its notes and commands: jaxrl_reason/configs/ppo.py."""
from jaxrl_reason.configs.ppo import get_config  # noqa: F401
