"""DAPO (Yu et al.): clip-higher, token-level loss, dynamic sampling of informative groups, soft overlong
punishment, no KL."""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/dapo"
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_low = 0.2
    c.method.eps_high = 0.28
    c.method.beta = 0.0
    # The paper's L_cache is 4,096 of 20,480 tokens (a fifth); 12 of this config's 64 is about that share.
    c.method.overlong_buffer = 12
    c.method.overlong_penalty = 1.0
    c.method.overlong_filter = False  # the paper's final recipe uses the soft punishment, not the filter
    c.rl.dynamic_sampling = True
    c.rl.dynamic_sampling_max_rounds = 3
    return c
