"""PPO^V on the CPU default task: PPO's solve and value rows plus RL^V's verify rows in one update, on the GRPO^V
preset's model and warm-ups (jaxrl_reason/configs/rlv.py).

    python experiments/train.py --config jaxrl_reason/configs/ppo_v.py
"""
from jaxrl_reason.configs.rlv import get_config as rlv
from jaxrl_reason.methods import method_knobs


def get_config():
    c = rlv()
    c.workdir = "runs/ppo_v"
    c.method.name = "ppo_v"
    c.method.extra = method_knobs("ppo_v")
    return c
