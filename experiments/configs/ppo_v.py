"""The preset itself, with its notes and commands: jaxrl_reason/configs/ppo_v.py."""
from jaxrl_reason.configs.ppo_v import get_config  # noqa: F401
