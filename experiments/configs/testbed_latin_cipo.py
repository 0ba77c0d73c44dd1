"""The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_latin_cipo.py."""
from jaxrl_reason.configs.testbed_latin_cipo import get_config  # noqa: F401
