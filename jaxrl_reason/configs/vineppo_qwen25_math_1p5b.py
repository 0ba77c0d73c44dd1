"""VinePPO^V in the RL^V paper's setting, for accelerators: Qwen2.5-Math-1.5B on Hendrycks MATH, 32 prompts x 5
samples per step, context 1024, evaluated on MATH500 -- the GRPO^V preset (rlv_qwen25_math_1p5b.py) with
VinePPO's Monte-Carlo step values. Weights and data must be on local disk (nothing is downloaded):

    python experiments/train.py --config jaxrl_reason/configs/vineppo_qwen25_math_1p5b.py \
        --config.model.hf_path=/data/Qwen2.5-Math-1.5B --config.tokenizer.path=/data/Qwen2.5-Math-1.5B \
        --config.data.path=/data/math/train.jsonl --config.data.heldout_path=/data/math500/test.jsonl

K = 9 continuations per step boundary is the VinePPO paper's (its released configs: num_mc_rollouts = 9); the
RL^V paper does not restate it. The step cap is ours (cost control, not in either paper): with 5 samples x 32
prompts x up to 15 interior boundaries x 9, one step samples up to 21,600 continuations; the sampling cost is
logged as vine/extra_tokens and vine/extra_seconds. For the baseline without the verifier, set method.name to
"vineppo" and method.extra to method_knobs("vineppo") with the same vine_samples and max_steps (method.extra
accepts only the named method's knobs).
"""
from jaxrl_reason.configs.rlv_qwen25_math_1p5b import get_config as rlv_math
from jaxrl_reason.methods import method_knobs


def get_config():
    c = rlv_math()
    c.workdir = "runs/vineppo_qwen25_math_1p5b"
    c.method.name = "vineppo_v"
    extra = method_knobs("vineppo_v")
    extra.update(verify_weight=float(c.method.extra.verify_weight))  # the GRPO^V preset's lambda
    c.method.extra = extra
    c.method.extra.vine_samples = 9  # K (VinePPO paper)
    c.method.extra.max_steps = 16  # at most 15 interior boundaries per solution (ours)
    # Up to 2,400 states x 9 = 21,600 continuation rows a step: in one sampler call their KV cache (1,024-token
    # prefixes + 768 new) would need ~1 TB. 64 states (576 rows) a call: ~30 GB (docs/results/tpu_compile.md)
    c.method.extra.vine_prompts_per_call = 64
    return c
