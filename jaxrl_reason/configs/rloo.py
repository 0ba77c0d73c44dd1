"""RLOO / leave-one-out PPO (the RL^V paper's value-free baseline): A_i = r_i - mean of the others."""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/rloo"
    c.method.estimator = "rloo"
    c.method.aggregation = "seq_mean_token_mean"
    return c
