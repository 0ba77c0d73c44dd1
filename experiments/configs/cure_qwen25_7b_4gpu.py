"""CURE on Qwen2.5-7B-Instruct, one host with 4 x 80 GB GPUs.

The preset itself, with its memory plan and launch command: jaxrl_reason/configs/cure_qwen25_7b_4gpu.py."""
from jaxrl_reason.configs.cure_qwen25_7b_4gpu import get_config  # noqa: F401
