"""GRPO^V on code for the CPU default: the policy also learns to verify its own programs (RL^V)."""

from jaxrl_reason.configs.code_grpo import get_config as code_grpo
from jaxrl_reason.methods import method_knobs


def get_config():
    c = code_grpo()
    c.workdir = "runs/code_rlv"
    c.method.name = "rlv"
    c.method.extra = method_knobs("rlv")  # RLV's own knobs at their defaults (methods/rlv.py)
    return c
