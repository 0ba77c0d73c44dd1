"""The preset itself, with its notes and commands: jaxrl_reason/configs/vineppo.py."""
from jaxrl_reason.configs.vineppo import get_config  # noqa: F401
