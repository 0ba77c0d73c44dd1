"""VinePPO on the CPU default task: Monte-Carlo values at each reasoning step instead of group advantages
(docs/methods/vineppo.md#spec). A compact arithmetic solution has one step per line, so a 5-operand
solution has up to 4 interior boundaries.

    python experiments/train.py --config jaxrl_reason/configs/vineppo.py
    python experiments/train.py --config jaxrl_reason/configs/vineppo.py --config.method.extra.vine_samples=8

Every VinePPO knob is `method.extra.<knob>` at its default (methods/vineppo.py); the extra sampling it spends
is logged every step as vine/extra_tokens and vine/extra_seconds.
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/vineppo"
    c.method.name = "vineppo"
    c.method.extra = method_knobs("vineppo")
    c.method.extra.max_steps = 5  # every line of a 5-operand solution is a step
    return c
