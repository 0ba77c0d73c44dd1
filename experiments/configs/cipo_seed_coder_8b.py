"""cipo_seed_coder_8b: the preset itself, with its notes and commands: jaxrl_reason/configs/cipo_seed_coder_8b.py."""
from jaxrl_reason.configs.cipo_seed_coder_8b import get_config  # noqa: F401
