"""Graph colouring testbed (measured: docs/results/testbed.md).

The preset itself, with its notes and commands: jaxrl_reason/configs/testbed_colour.py."""
from jaxrl_reason.configs.testbed_colour import get_config  # noqa: F401
