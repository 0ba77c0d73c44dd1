"""cipo_v: the preset itself, with its notes and commands: jaxrl_reason/configs/cipo_v.py."""
from jaxrl_reason.configs.cipo_v import get_config  # noqa: F401
