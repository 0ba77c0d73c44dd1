"""GRPO (Shao et al.): group-normalised advantages, sequence-mean of token-mean loss, symmetric clip."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_default import get_config as tiny_default  # noqa: E402


def get_config():
    c = tiny_default()
    c.workdir = "runs/grpo"
    c.method.estimator = "grpo"  # (r - mean) / std within the group
    c.method.aggregation = "seq_mean_token_mean"
    return c
