"""GRPO^V on the 4x4 Latin-square testbed.

The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_latin.py."""
from jaxrl_reason.configs.testbed_latin import get_config  # noqa: F401
