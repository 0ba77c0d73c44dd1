"""RL^V in the paper's setting, for accelerators: Qwen2.5-Math-1.5B, Hendrycks MATH, 32 prompts x 5 samples per
step, context 1024, evaluated on MATH500. Weights and data must be on local disk (nothing is downloaded):

    python experiments/train.py --config jaxrl_reason/configs/rlv_qwen25_math_1p5b.py \
        --config.model.hf_path=/data/Qwen2.5-Math-1.5B --config.tokenizer.path=/data/Qwen2.5-Math-1.5B \
        --config.data.path=/data/math/train.jsonl --config.data.heldout_path=/data/math500/test.jsonl
    python experiments/evaluate.py --model runs/rlv_qwen25_math_1p5b/final --data /data/math500/test.jsonl --n 16
"""

from jaxrl_reason.configs.rlv import get_config as rlv


def get_config():
    c = rlv()
    c.workdir = "runs/rlv_qwen25_math_1p5b"
    c.model.hf_path = "/data/Qwen2.5-Math-1.5B"  # local HF directory
    c.model.dtype = "bfloat16"
    c.tokenizer.path = "/data/Qwen2.5-Math-1.5B"
    c.data.source = "file"
    c.data.path = "/data/math/train.jsonl"  # Hendrycks MATH train: {"problem", "solution"/"answer"}
    c.data.heldout_path = "/data/math500/test.jsonl"  # MATH500
    c.data.question_field = "problem"
    c.data.answer_field = "answer"
    c.data.heldout_size = 500
    c.sft.steps = 0  # no warm-up: start from the pretrained model
    # A pretrained LM already answers the Yes/No verify prompt (the cold start the tiny model's warm-up removes is
    # specific to a model that has only seen worked solutions), and the warm-up needs an SFT slice to sample on.
    c.sft.verify_steps = 0
    c.rl.steps = 500
    c.rl.prompts_per_step = 32
    c.rl.samples_per_prompt = 5
    c.rl.max_new_tokens = 1024 - 256  # context 1024 including the prompt
    c.rl.lr = 1e-6
    c.rl.warmup_steps = 10
    # 20 x 16 rows: the TPU compiler's update on one chip peaks at 62.2 GiB (16 x 20 rows: 76.5 GiB); 8 x 40 rows
    # needed 98 GiB of temporaries, more than an 80 GB GPU or a 95 GiB v5p chip holds (docs/results/tpu_compile.md)
    c.rl.micro_batches = 20
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.rl.eval_batch_size = 64
    c.method.estimator = "grpo"
    c.method.extra.verify_weight = 1.0
    return c
