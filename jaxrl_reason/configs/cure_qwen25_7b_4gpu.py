"""CURE (docs/methods/cure.md#spec) on Qwen2.5-7B-Instruct, one host with 4 x 80 GB GPUs: parameters, AdamW state and
gradients fully sharded over the 4 devices (fsdp=4), batch rows split the same way, paper-run loss settings
(lr 1e-6, clip 0.2 / 0.28, dual-clip 10, no KL).

The method is `jaxrl_reason.methods.cure.CURE` (registered as "cure"); the `method.extra` knobs below are its
constructor arguments, the names of docs/methods/cure.md#spec. jaxrl_reason/configs/cure.py is the CPU variant.

Rows per step, worst case with Q=16 queries x K=4 solve samples and M=4 guided solutions per critique:
solve 64 + replayed guided solutions <= 64 (at most K per query) + critiques 32 (Q*K/2, at most half of wrong
samples) + guided <= 16 x 4 = 64, i.e. <= 224 training rows (the plan keeps 384); at most 64 rows are decoded
together. Context 2048 holds a 512-token problem + a 1024-token solution + template + a 384-token critique, and
a guided prompt + 1024 tokens.

Pre-flight, bfloat16 parameters and activations (peak 25.8 GiB of 80 GiB per device, 32%; with 48 micro-batches
of 8 rows it is 33.8 GiB; float32 parameters with 96 micro-batches would peak at 43.5 GiB). The activation part is
the planner's estimate for the default scan_residuals="matmuls" (checked against XLA's count on CPU only), so the
config keeps 96 micro-batches until a run on the GPUs confirms the headroom:
    python experiments/plan_memory.py --model qwen2.5-7b-instruct --mesh fsdp=-1 --devices 4 \
        --param-dtype bfloat16 --dtype bfloat16 --train-rows 384 --train-length 2048 --micro-batches 96 \
        --logprob-chunk 512 --sample-rows 128 --sample-length 2048 --device-memory-gb 80
        params 3.55 GiB, optimizer state 7.09, gradients 7.09, activations 8.04, KV cache 3.50 -> peak 25.78
Launch (weights and data on local disk, nothing is downloaded):
    experiments/launch/run.sh jaxrl_reason/configs/cure_qwen25_7b_4gpu.py \
        --config.model.hf_path=/data/Qwen2.5-7B-Instruct --config.tokenizer.path=/data/Qwen2.5-7B-Instruct
"""
from jaxrl_reason.configs import fsdp_over_devices
from jaxrl_reason.configs.cure import get_config as cure_cpu


def get_config():
    c = cure_cpu()  # the CURE method section, every knob at its default but the CPU run's departures
    c.workdir = "runs/cure_qwen25_7b_4gpu"
    c.model.hf_path = "/data/Qwen2.5-7B-Instruct"  # local HF directory
    c.model.dtype = "bfloat16"  # parameters and AdamW state; float32 would need 65.7 of 80 GiB (see above)
    c.model.compute_dtype = "bfloat16"
    c.tokenizer.path = "/data/Qwen2.5-7B-Instruct"
    c.data.source = "file"
    c.data.path = "/data/math/train.jsonl"  # {"problem", "answer"} rows
    c.data.heldout_path = "/data/math500/test.jsonl"  # MATH500
    c.data.question_field = "problem"
    c.data.answer_field = "answer"
    c.data.heldout_size = 500
    c.sft.steps = 0  # start from the instruct model

    # CURE's knobs and their meanings: methods/cure.py; here only what the 7B run sets differently.
    # [choice] what the 2,048 context holds after a 512-token problem and a 1,024-token solution (the plan above);
    # not the paper's: the authors' run gives critiques its whole 4,096-token response budget (their
    # recipe/cure/run_qwen2.5-7b_math.sh), which the class default (0 = rl.max_new_tokens) follows
    c.method.extra.critique_max_new_tokens = 384
    c.method.extra.critique_batch_size = 0  # 0 = Q*K/2 = 32 critiques per step (the paper: 256 per 512 solves)
    c.method.extra.rescore_chunk = 512  # time chunk of those forwards' [rows, time, 152k] logits

    c.rl.steps = 400
    c.rl.prompts_per_step = 16  # Q
    c.rl.samples_per_prompt = 4  # K
    c.rl.max_new_tokens = 1024
    c.rl.temperature = 1.0
    c.rl.lr = 1e-6
    c.rl.warmup_steps = 10
    c.rl.micro_batches = 96  # 384 rows -> 4 per micro-batch, one per GPU: activations ~8 GiB per device
    c.rl.logprob_chunk = 512  # time chunk of the [rows, time, 152k vocab] logits
    c.rl.checkpoint_every = 25
    c.rl.eval_every = 50
    c.rl.eval_batch_size = 128

    # one process drives the 4 local GPUs; the batch the mesh was planned for (tests re-check the fit)
    c.parallel = fsdp_over_devices(80, train_rows=384, sample_rows=128, context=2048, prompt_tokens=512)
    return c
