"""The union `self_check` (docs/methods/union.md) on Qwen2.5-7B-Instruct, one host with 4 x 80 GB GPUs: the CURE 7B
preset's model, data, mesh and memory plan (`cure_qwen25_7b_4gpu`), with the verify (RL^V) and correct (CIPO)
parts on as well. Compiled for h100:4 with `experiments/launch/compile_tpu.py` (docs/results/tpu_compile.md): every
executable of its step fits, peak 27.75 of 80 GiB a GPU (the update; the 32-prompt critique sampler 23.95).

Rows per step, worst case with Q=16 x K=4 solves: the CURE preset's <= 224 (solve 64, replay <= 64, critiques 32,
guided <= 64), verify rows <= 64 (one per solve sample; balanced, so at most 2 x the minority class) and
corrections 16 replay prompts x G' = 4 = 64: <= 352, inside the 384 rows the CURE preset plans for (a verify row is
a single target token; a correction row is at most a 1,024-token prompt attempt + 1,024 new tokens, inside the
2,048 context). The sampler decodes at most 64 rows together, as for CURE.
Launch (weights and data on local disk, nothing is downloaded):
    experiments/launch/run.sh jaxrl_reason/configs/self_check_qwen25_7b.py \
        --config.model.hf_path=/data/Qwen2.5-7B-Instruct --config.tokenizer.path=/data/Qwen2.5-7B-Instruct
"""
from jaxrl_reason.configs.cure_qwen25_7b_4gpu import get_config as cure_7b
from jaxrl_reason.methods import method_knobs


def get_config():
    c = cure_7b()
    c.workdir = "runs/self_check_qwen25_7b"
    cure_extra = dict(c.method.extra)
    c.method.name = "self_check"
    c.method.extra = method_knobs("self_check")
    for k, v in cure_extra.items():  # the CURE preset's departures (critique budget, rescoring chunk) carry over
        c.method.extra[k] = v
    c.method.extra.correction_samples = 4  # G' = K: one replay prompt per query, 64 correction rows
    c.method.extra.correction_max_new_tokens = 1024  # a correction is a complete solution: the solve budget
    return c
