"""GRPO (Shao et al.): group-normalised advantages, sequence-mean of token-mean loss, symmetric clip."""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/grpo"
    c.method.estimator = "grpo"  # (r - mean) / std within the group
    # the loss is GRPO's own (methods.grpo.GRPO.default_loss: sequence-mean of token-mean, clip 0.2, no KL), left
    # unset so that --config.method.name=<another> trains that method's own loss
    return c
