"""CIPO on the 4x4 Latin-square testbed with the worked check in the correction, on the 4 x 256 policy.

The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_latin_cipo_check.py."""
from jaxrl_reason.configs.testbed_latin_cipo_check import get_config  # noqa: F401
