"""CIPO in the paper's math setting, for accelerators: Qwen3-4B on local math data, 500 steps. Weights and data
must be on local disk (nothing is downloaded):

    python experiments/train.py --config jaxrl_reason/configs/cipo_qwen3_4b_math.py \
        --config.model.hf_path=/data/Qwen3-4B --config.tokenizer.path=/data/Qwen3-4B \
        --config.data.path=/data/math/train.jsonl --config.data.heldout_path=/data/math500/test.jsonl

The seed text stops before its experimental setup: the model and the step count are the paper's; every other
number below is ours (docs/methods/cipo.md, "Accelerator runs"), chosen like the other accelerator presets.
"""

from jaxrl_reason.configs.cipo import get_config as cipo


def get_config():
    c = cipo()
    c.workdir = "runs/cipo_qwen3_4b_math"
    c.model.hf_path = "/data/Qwen3-4B"  # local HF directory
    c.model.dtype = "bfloat16"
    c.tokenizer.path = "/data/Qwen3-4B"
    c.data.source = "file"
    c.data.path = "/data/math/train.jsonl"  # {"problem", "answer"}
    c.data.heldout_path = "/data/math500/test.jsonl"
    c.data.question_field = "problem"
    c.data.answer_field = "answer"
    c.data.heldout_size = 500
    c.sft.steps = 0  # start from the pretrained model
    c.rl.steps = 500  # the paper's
    c.rl.prompts_per_step = 32
    c.rl.samples_per_prompt = 8  # G
    c.rl.max_new_tokens = 2048
    c.rl.temperature = 1.0
    c.rl.lr = 1e-6
    c.rl.warmup_steps = 10
    c.rl.micro_batches = 16
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.rl.eval_batch_size = 64
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_high = 0.28
    c.method.extra.correction_samples = 8  # G' = G
    c.method.extra.replay_prompts = 0  # one replay prompt per query
    return c
