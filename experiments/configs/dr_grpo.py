"""Dr. GRPO (Liu et al.): no std scaling, token sums normalised by a fixed length (no length bias)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_default import get_config as tiny_default  # noqa: E402


def get_config():
    c = tiny_default()
    c.workdir = "runs/dr_grpo"
    c.method.estimator = "dr_grpo"  # r - mean within the group
    c.method.aggregation = "seq_mean_token_sum_norm"
    c.method.max_len = 0  # 0 = rl.max_new_tokens
    return c
