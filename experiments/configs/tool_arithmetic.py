"""Tool-integrated reasoning on the CPU (calculator, 3-digit multiplication).

The preset itself, with its notes and commands: jaxrl_reason/configs/tool_arithmetic.py."""
from jaxrl_reason.configs.tool_arithmetic import get_config  # noqa: F401
