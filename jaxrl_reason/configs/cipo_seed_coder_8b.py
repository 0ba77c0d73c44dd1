"""CIPO in the paper's code setting, for accelerators: Seed-Coder-8B on local code data, rewards from the sandbox
(the same verifier as the solves), corrections in one fenced python block. Weights and data must be on local disk:

    python experiments/train.py --config jaxrl_reason/configs/cipo_seed_coder_8b.py \
        --config.model.hf_path=/data/Seed-Coder-8B-Instruct --config.tokenizer.path=/data/Seed-Coder-8B-Instruct \
        --config.data.path=/data/code/train.jsonl

The seed text stops before its experimental setup: the model is the paper's; every number below is ours
(docs/methods/cipo.md, "Accelerator runs"), sized like configs/code_qwen25_coder_1p5b.py.

One host with 8 x 80 GB GPUs, parameters, AdamW state and rows fully sharded over the 8 (fsdp=8): 8.25B bf16
parameters with their AdamW state and gradients are ~66 GB before any activation, too much for one GPU. Each
update trains 256 solve rows (<= 256 + 1,024 tokens) and 256 correction rows, whose prompts hold the task and a
whole attempt (<= ~1,350 tokens) before the <= 1,024-token correction: 512 rows in the 2,560-token length bucket.
The model shape without weights: the "seed-coder-8b-instruct" preset (jaxrl_reason/models/presets.py), picked by
the directory name. Checked by compiling every executable of the step for 8 H100s (docs/results/tpu_compile.md):
    python experiments/launch/compile_tpu.py --config jaxrl_reason/configs/cipo_seed_coder_8b.py --topology h100:8
"""

from jaxrl_reason.configs import fsdp_over_devices
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
    c.rl.micro_batches = 16  # 512 rows -> 4 per GPU a micro-batch
    c.rl.logprob_chunk = 512  # time chunk of the [rows, 2,560, 155k vocab] logits
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_high = 0.28
    c.method.extra.correction_samples = 8

    # one process drives the 8 GPUs of the node; the batch the mesh was planned for (see above)
    c.parallel = fsdp_over_devices(
        80, train_rows=512,  # 32 x 8 solve rows + 32 replay prompts x 8 corrections
        sample_rows=256,
        context=2560,  # length bucket of a correction row (~1,350-token prompt + 1,024)
        prompt_tokens=256)
    return c
