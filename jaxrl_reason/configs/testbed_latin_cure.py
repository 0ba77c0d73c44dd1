"""CURE on the 4x4 Latin-square testbed: the same task and warm-up as `testbed_latin`, plus critique rows in the
SFT warm-up so that a from-scratch model has seen the four-field format before CURE trains it (the paper starts
from instruct models that already follow such prompts). The CURE-vs-GRPO comparison runs it through

    python experiments/research/bench_cure.py --config experiments/configs/testbed_latin_cure.py

Knobs scaled from the paper's run (METHODS.md §3: 128 prompts x K = 4 solves, a critique batch of 256, M = 4
guided re-solves) to 2 CPU cores: 8 prompts x K = 4 solves, every CURE knob at its default otherwise
(`method_knobs("cure")`), critiques of up to 96 tokens (a latin_square critique target is ~70).
"""
from jaxrl_reason.configs.testbed_latin import get_config as testbed_latin
from jaxrl_reason.methods import method_knobs
from jaxrl_reason.methods.cure import PAPER_LOSS


def get_config():
    c = testbed_latin()
    c.workdir = "runs/testbed_latin_cure"
    c.method.name = "cure"
    for knob in ("aggregation", "eps_low", "eps_high", "dual_clip", "beta"):
        setattr(c.method, knob, getattr(PAPER_LOSS, knob))
    c.method.extra = method_knobs("cure")
    c.method.extra.critique_max_new_tokens = 96
    c.sft.aux_critique_share = 0.25  # critique rows of the task's own wrong and right solutions
    # ... wrong ones spread like the policy's own wrong grids (~5 of 10 blanks off): the minimal 1-2-cell errors
    # taught the CIPO warm-up to fix 71% of injected attempts and 2% of its own (docs/results/cipo_testbed.md)
    c.data.inject_extent = "spread"
    c.model.max_position_embeddings = 1024  # a critique prompt with its grid and instructions is ~500 tokens
    c.rl.samples_per_prompt = 4  # K, as in the paper run
    return c
