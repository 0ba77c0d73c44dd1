"""CIPO on the CPU default task: GRPO plus correction rows built from the policy's own attempts
(docs/methods/cipo.md#spec).

    python experiments/train.py --config jaxrl_reason/configs/cipo.py
    python experiments/train.py --config jaxrl_reason/configs/cipo.py --config.method.extra.alpha=3
"""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/cipo"
    c.method.name = "cipo"
    c.method.estimator = "grpo"
    # CIPO's own knobs at their defaults (methods/cipo.py), so that each is settable as --config.method.extra.<knob>
    c.method.extra = method_knobs("cipo")
    # Sized like configs/rlv.py: the correction stream is read by the same policy, which must already solve.
    c.model.hidden_size = 128
    c.model.num_hidden_layers = 6
    c.model.intermediate_size = 384
    c.sft.steps = 700
    # A replay prompt holds the question and a whole attempt (<= max_new_tokens = 64): the default 512-token
    # context leaves room for both and the correction.
    return c
