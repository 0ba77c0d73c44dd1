"""Tool-integrated reasoning on the CPU: a tiny model trained from scratch on 3-digit x 3-digit multiplication, which
it cannot compute in its head, with a calculator it learns to call in the SFT warm-up
(`<calculator>a * b</calculator>`, the result as a tool turn masked from the loss, then the boxed answer), then
GRPO on multi-turn rollouts that continue from the KV cache (`jaxrl_reason/rollout/`).

    python experiments/train.py --config jaxrl_reason/configs/tool_arithmetic.py

The tool-vs-no-tool comparison on this task (3 seeds): experiments/research/tool_arithmetic.py,
docs/results/multi_turn.md. Multi-turn rollouts train GRPO-family methods only (RL^V, CURE, CIPO are refused).
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/tool_arithmetic"
    c.data.min_digits = 3
    c.data.max_digits = 3
    c.data.min_operands = 2
    c.data.max_operands = 2
    c.data.operations = "*"
    c.tools.tools = ("calculator",)
    c.tools.max_turns = 3  # a call, its result, the answer (one spare turn)
    c.tools.max_turn_tokens = 32
    c.tools.max_obs_tokens = 24
    c.sft.steps = 400
    c.rl.steps = 50
    c.rl.max_new_tokens = 64  # the whole conversation after the prompt: model and tool turns
    c.rl.temperature = 1.0
    c.rl.eval_every = 0
    return c
