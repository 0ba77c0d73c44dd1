"""GRPO on a real pretrained instruct model that ships offline.

The preset itself, with its notes and commands: jaxrl_reason/configs/smollm2_grpo.py."""
from jaxrl_reason.configs.smollm2_grpo import get_config  # noqa: F401
