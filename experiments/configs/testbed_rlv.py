"""GRPO^V on the graph-path testbed.

The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_rlv.py."""
from jaxrl_reason.configs.testbed_rlv import get_config  # noqa: F401
