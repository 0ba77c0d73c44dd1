"""The embedded CPU default.

The preset itself, with its notes and commands: jaxrl_reason/configs/tiny_default.py."""
from jaxrl_reason.configs.tiny_default import get_config  # noqa: F401
