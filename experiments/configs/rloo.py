"""RLOO / leave-one-out PPO (the RL^V paper's value-free baseline): A_i = r_i - mean of the others."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_default import get_config as tiny_default  # noqa: E402


def get_config():
    c = tiny_default()
    c.workdir = "runs/rloo"
    c.method.estimator = "rloo"
    c.method.aggregation = "seq_mean_token_mean"
    return c
