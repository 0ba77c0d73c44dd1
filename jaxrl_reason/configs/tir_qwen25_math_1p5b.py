"""Tool-integrated reasoning for accelerators (config only, not run here): Qwen2.5-Math-1.5B with the sandboxed
Python tool, GRPO on multi-turn rollouts over Hendrycks MATH, evaluated on MATH500. The model writes
`<python>...</python>`; the program runs in the bubblewrap sandbox (`rewards/sandbox.py`), its output comes back as
a tool turn of the chat template (masked from the loss), and generation continues from the KV cache. Weights and
data must be on local disk (nothing is downloaded):

    python experiments/train.py --config jaxrl_reason/configs/tir_qwen25_math_1p5b.py \
        --config.model.hf_path=/data/Qwen2.5-Math-1.5B --config.tokenizer.path=/data/Qwen2.5-Math-1.5B \
        --config.data.path=/data/math/train.jsonl --config.data.heldout_path=/data/math500/test.jsonl

Without an SFT warm-up the model learns the tag syntax from the first message's tool list alone
(`tools.instructions`); Qwen2.5-Math's own TIR format writes ```python blocks, which the tool also accepts inside
the tags.
"""
from jaxrl_reason.configs.grpo import get_config as grpo


def get_config():
    c = grpo()
    c.workdir = "runs/tir_qwen25_math_1p5b"
    c.model.hf_path = "/data/Qwen2.5-Math-1.5B"  # local HF directory
    c.model.dtype = "bfloat16"
    c.tokenizer.path = "/data/Qwen2.5-Math-1.5B"
    c.data.source = "file"
    c.data.path = "/data/math/train.jsonl"  # Hendrycks MATH train: {"problem", "answer"}
    c.data.heldout_path = "/data/math500/test.jsonl"  # MATH500
    c.data.question_field = "problem"
    c.data.answer_field = "answer"
    c.data.heldout_size = 500
    c.sft.steps = 0  # start from the pretrained model
    c.tools.tools = ("python",)
    c.tools.tool_kwargs = {"python": {"timeout_s": 5.0, "max_chars": 1000, "workers": 16}}
    c.tools.max_turns = 4
    c.tools.max_turn_tokens = 768
    c.tools.max_obs_tokens = 256
    c.tools.chunk_steps = 32
    c.rl.steps = 500
    c.rl.prompts_per_step = 32
    c.rl.samples_per_prompt = 5
    c.rl.max_new_tokens = 3072 - 256  # every turn after the prompt, model and tool; Qwen2.5-Math's context is 4096
    c.rl.lr = 1e-6
    c.rl.warmup_steps = 10
    c.rl.micro_batches = 8
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.rl.eval_batch_size = 64
    return c
