"""RLOO^V (leave-one-out PPO + generative verifier) on the CPU default task."""

from jaxrl_reason.configs.rlv import get_config as rlv


def get_config():
    c = rlv()
    c.workdir = "runs/rloo_v"
    c.method.estimator = "rloo"
    return c
