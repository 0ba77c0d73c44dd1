"""The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_latin_cure.py."""
from jaxrl_reason.configs.testbed_latin_cure import get_config  # noqa: F401
