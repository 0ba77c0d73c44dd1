"""CIPO in the paper's math setting, for accelerators: Qwen3-4B on local math data, 500 steps. Weights and data
must be on local disk (nothing is downloaded):

    python experiments/train.py --config jaxrl_reason/configs/cipo_qwen3_4b_math.py \
        --config.model.hf_path=/data/Qwen3-4B --config.tokenizer.path=/data/Qwen3-4B \
        --config.data.path=/data/math/train.jsonl --config.data.heldout_path=/data/math500/test.jsonl

The seed text stops before its experimental setup: the model and the step count are the paper's; every other
number below is ours (docs/methods/cipo.md, "Accelerator runs"), chosen like the other accelerator presets.

One host with 8 x 80 GB GPUs (an H100 node), parameters, AdamW state and rows fully sharded over the 8 (fsdp=8).
On one device it does not fit: the correction sampler's KV cache alone (256 rows x 6,144 slots x 144 KiB a token)
is 216 GiB. Each update trains 256 solve rows (<= 256 + 2,048 tokens) and 256 correction rows, whose prompts
hold the question and a whole attempt (<= ~2,400 tokens) before the <= 2,048-token correction: 512 rows in the
5,120-token length bucket. Checked by compiling every executable of the step for 8 H100s
(docs/results/tpu_compile.md; peak per GPU there):
    python experiments/launch/compile_tpu.py --config jaxrl_reason/configs/cipo_qwen3_4b_math.py --topology h100:8
"""

from jaxrl_reason.configs import fsdp_over_devices
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
    c.rl.micro_batches = 32  # 512 rows -> 2 per GPU a micro-batch (16: the update's activations ~2x)
    c.rl.logprob_chunk = 512  # time chunk of the [rows, 5,120, 152k vocab] logits
    c.rl.checkpoint_every = 50
    c.rl.eval_every = 50
    c.rl.eval_batch_size = 64
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    c.method.eps_high = 0.28
    c.method.extra.correction_samples = 8  # G' = G
    c.method.extra.replay_prompts = 0  # one replay prompt per query

    # one process drives the 8 GPUs of the node; the batch the mesh was planned for (see above)
    c.parallel = fsdp_over_devices(
        80, train_rows=512,  # 32 x 8 solve rows + 32 replay prompts x 8 corrections
        sample_rows=256,  # the correction sampler's rows (as many as the rollouts')
        context=5120,  # length bucket of a correction row (~2,400-token prompt + 2,048)
        prompt_tokens=256)
    return c
