"""VinePPO^V on the CPU default task: VinePPO's solve rows plus RL^V's verify rows in one update, on the GRPO^V
preset's model and warm-ups (jaxrl_reason/configs/rlv.py).

    python experiments/train.py --config jaxrl_reason/configs/vineppo_v.py
"""
from jaxrl_reason.configs.rlv import get_config as rlv
from jaxrl_reason.methods import method_knobs


def get_config():
    c = rlv()
    c.workdir = "runs/vineppo_v"
    c.method.name = "vineppo_v"
    c.method.extra = method_knobs("vineppo_v")
    c.method.extra.max_steps = 5  # every line of a 5-operand solution is a step
    return c
