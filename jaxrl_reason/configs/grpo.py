"""GRPO (Shao et al.): group-normalised advantages, sequence-mean of token-mean loss, symmetric clip."""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/grpo"
    c.method.estimator = "grpo"  # (r - mean) / std within the group
    c.method.aggregation = "seq_mean_token_mean"
    return c
