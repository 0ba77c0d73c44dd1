"""RLOO / leave-one-out PPO (the RL^V paper's value-free baseline).

The preset itself, with its notes and commands: jaxrl_reason/configs/rloo.py."""
from jaxrl_reason.configs.rloo import get_config  # noqa: F401
