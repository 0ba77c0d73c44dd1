"""PPO with a learned value on the CPU default task: a zero-initialised value head on the policy's final hidden
state (shared trunk), GAE advantages whitened over the step's completion tokens, and the clipped value loss in the
same fused update as the PPO-clip term (docs/methods/ppo.md#spec).

    python experiments/train.py --config jaxrl_reason/configs/ppo.py
    python experiments/train.py --config jaxrl_reason/configs/ppo.py --config.method.extra.lam=0.95
    python experiments/train.py --config jaxrl_reason/configs/ppo.py --config.method.extra.critic=separate

Every PPO knob is `method.extra.<knob>` at its default (methods/ppo.py). The trainer adds the value head; the
final HF export (`<workdir>/final`) is the plain causal LM, without it.
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/ppo"
    c.method.name = "ppo"
    c.method.extra = method_knobs("ppo")
    return c
