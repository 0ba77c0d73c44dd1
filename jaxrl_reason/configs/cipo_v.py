"""The union GRPO^V + CIPO on the CPU default task: solve, verify and correct rows in one fused update, each term
logged under its own name (loss/pg, loss/verify, loss/correct) with its stream's metrics
(docs/methods/composition.md#spec).

    python experiments/train.py --config jaxrl_reason/configs/cipo_v.py
"""

from jaxrl_reason.configs.rlv import get_config as rlv
from jaxrl_reason.methods import method_knobs


def get_config():
    c = rlv()  # RL^V's model, warm-ups and verify knobs
    c.workdir = "runs/cipo_v"
    c.method.name = "cipo_v"
    c.method.extra = method_knobs("cipo_v")
    return c
