"""GRPO on code for the CPU default: a tiny model, procedural function-writing tasks with assert tests, SFT on
the reference programs, rewards from running the extracted program in the bubblewrap sandbox.

    python experiments/train.py --config jaxrl_reason/configs/code_grpo.py
"""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/code_grpo"
    c.data.source = "code"  # procedural tasks (data.path="" ), "humaneval", or a JSONL of code problems
    c.data.path = ""
    c.data.train_size = 4000
    c.data.heldout_size = 128
    c.tokenizer.vocab_size = 768
    c.sft.examples = 2000
    c.rl.max_new_tokens = 96  # one short function in a fenced block
    c.rl.eval_batch_size = 64
    return c
