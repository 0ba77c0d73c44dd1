"""cipo_code: the preset itself, with its notes and commands: jaxrl_reason/configs/cipo_code.py."""
from jaxrl_reason.configs.cipo_code import get_config  # noqa: F401
