"""Tool-integrated reasoning on the CPU: a tiny model trained from scratch on 2-digit x 2-digit multiplication, which
it cannot compute in its head, with a calculator it learns to call in the SFT warm-up
(`<calculator>a * b</calculator>`, the result as a tool turn masked from the loss, then the boxed answer), then
GRPO on multi-turn rollouts that continue from the KV cache (`jaxrl_reason/rollout/`).

    python experiments/train.py --config jaxrl_reason/configs/tool_arithmetic.py

The tool-vs-no-tool comparison on this task (3 seeds, docs/results/multi_turn.md) is this config and two arms:

    python experiments/compare.py --config jaxrl_reason/configs/tool_arithmetic.py --arm tool \
        --arm "no_tool:tools.tools=()" --baseline no_tool --seeds 0,1,2 --eval n=1,temperature=0,batch_size=64

Multi-turn rollouts train GRPO-family methods, RL^V, CURE, CIPO and self_check (`method.name=...`); PPO and VinePPO
are refused at start-up (docs/methods/multi_turn.md#training-and-warm-up).
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/tool_arithmetic"
    # 3 x 3 digits left every warmed-up policy at 0% after 300-400 SFT steps (docs/results/multi_turn.md); with 2 x 2
    # the pilot's tool policy copied every operand into its call after 600 steps
    c.data.min_digits = 2
    c.data.max_digits = 2
    c.data.min_operands = 2
    c.data.max_operands = 2
    c.data.operations = "*"
    c.tools.tools = ("calculator",)
    c.tools.max_turns = 3  # a call, its result, the answer (one spare turn)
    c.tools.max_turn_tokens = 32
    c.tools.max_obs_tokens = 24
    c.sft.steps = 750  # the pilot: 600 steps copied the operands but rarely the tool's result (1.2% held-out)
    c.rl.steps = 20
    c.rl.max_new_tokens = 64  # the whole conversation after the prompt: model and tool turns
    c.rl.temperature = 0.7  # the pilot's policy scored 0 of 64 samples per step at 1.0; the tiny default's value
    c.rl.eval_every = 0
    return c
