"""cipo: the preset itself, with its notes and commands: jaxrl_reason/configs/cipo.py."""
from jaxrl_reason.configs.cipo import get_config  # noqa: F401
