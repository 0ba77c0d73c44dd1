"""RLOO^V (leave-one-out PPO + generative verifier) on the CPU default task."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rlv import get_config as rlv  # noqa: E402


def get_config():
    c = rlv()
    c.workdir = "runs/rloo_v"
    c.method.estimator = "rloo"
    return c
