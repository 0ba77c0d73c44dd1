"""GRPO^V on code for the CPU default: the policy also learns to verify its own programs (RL^V)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from code_grpo import get_config as code_grpo  # noqa: E402


def get_config():
    c = code_grpo()
    c.workdir = "runs/code_rlv"
    c.method.name = "rlv"
    c.method.extra.verify_weight = 1.0  # lambda
    c.method.extra.balance = "subsample"
    c.method.extra.max_verify_rows = 0
    c.method.extra.measure_verifier = True
    return c
