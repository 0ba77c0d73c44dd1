"""RLOO^V (leave-one-out PPO + generative verifier) on the CPU default task.

The preset itself, with its notes and commands: jaxrl_reason/configs/rloo_v.py."""
from jaxrl_reason.configs.rloo_v import get_config  # noqa: F401
