"""DAPO (Yu et al.).

The preset itself, with its notes and commands: jaxrl_reason/configs/dapo.py."""
from jaxrl_reason.configs.dapo import get_config  # noqa: F401
