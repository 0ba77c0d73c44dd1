"""CIPO in the paper's code setting, for accelerators: Seed-Coder-8B on local code data, rewards from the sandbox
(the same verifier as the solves), corrections in one fenced python block. Weights and data must be on local disk:

    python experiments/train.py --config jaxrl_reason/configs/cipo_seed_coder_8b.py \
        --config.model.hf_path=/data/Seed-Coder-8B-Instruct --config.tokenizer.path=/data/Seed-Coder-8B-Instruct \
        --config.data.path=/data/code/train.jsonl

The seed text stops before its experimental setup: the model is the paper's; every number below is ours
(docs/methods/cipo.md, "Accelerator runs"), sized like configs/code_qwen25_coder_1p5b.py.
"""

from jaxrl_reason.configs.cipo_code import get_config as cipo_code


def get_config():
    c = cipo_code()
    c.workdir = "runs/cipo_seed_coder_8b"
    c.model.hf_path = "/data/Seed-Coder-8B-Instruct"
    c.model.dtype = "bfloat16"
    c.tokenizer.path = "/data/Seed-Coder-8B-Instruct"
    c.data.path = "/data/code/train.jsonl"  # any format load_code_jsonl detects
    c.data.heldout_size = 164
    c.sft.steps = 0
    c.rl.steps = 500
    c.rl.prompts_per_step = 32
    c.rl.samples_per_prompt = 8
    c.rl.max_new_tokens = 1024
    c.rl.lr = 1e-6
    c.rl.micro_batches = 16
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_high = 0.28
    c.method.extra.correction_samples = 8
    return c
