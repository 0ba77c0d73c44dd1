"""CIPO on the CPU code task: GRPO on procedural function-writing tasks plus corrections of the policy's own
programs, rewarded in the sandbox like the solves (docs/methods/cipo.md#spec-the-two-streams).

    python experiments/train.py --config jaxrl_reason/configs/cipo_code.py
"""

from jaxrl_reason.configs.code_grpo import get_config as code_grpo
from jaxrl_reason.data.prompts import CODE_INSTRUCTION
from jaxrl_reason.methods import method_knobs


def get_config():
    c = code_grpo()
    c.workdir = "runs/cipo_code"
    c.method.name = "cipo"
    c.method.extra = method_knobs("cipo")
    c.method.extra.answer_instruction = CODE_INSTRUCTION  # a correction is one fenced python block
    return c
