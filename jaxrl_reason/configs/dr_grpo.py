"""Dr. GRPO (Liu et al.): no std scaling, token sums normalised by a fixed length (no length bias)."""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/dr_grpo"
    c.method.estimator = "dr_grpo"  # r - mean within the group
    c.method.aggregation = "seq_mean_token_sum_norm"
    c.method.max_len = 0  # 0 = rl.max_new_tokens
    return c
