"""DAPO (Yu et al.): clip-higher, token-level loss, dynamic sampling of informative groups, no KL."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_default import get_config as tiny_default  # noqa: E402


def get_config():
    c = tiny_default()
    c.workdir = "runs/dapo"
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_low = 0.2
    c.method.eps_high = 0.28
    c.method.beta = 0.0
    c.rl.dynamic_sampling = True
    c.rl.dynamic_sampling_max_rounds = 3
    return c
