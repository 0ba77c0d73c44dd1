"""CURE on the 4x4 Latin-square testbed: the task of `testbed_latin`, a BPE trained on the critique rows, an SFT
warm-up with 10% critique and 10% hint-guided re-solve rows, then critiques and guided re-solves of the warmed-up
policy's own attempts (`sft.own_attempt_*`), so that a from-scratch model has seen every CURE prompt before CURE
trains it (the paper starts from instruct models that already follow such prompts). The guided prompt puts the
guidance before the problem (`guided_layout = "first"`, a [choice]: docs/methods/cure.md). The CURE-vs-GRPO
comparison runs it through

    python experiments/research/bench_cure.py --config jaxrl_reason/configs/testbed_latin_cure.py

Knobs scaled from the paper's run (docs/methods/cure.md#spec-the-papers-run: 128 prompts x K = 4 solves, a critique
batch of 256, M = 4 guided re-solves) to 2 CPU cores: 8 prompts x K = 4 solves, every CURE knob at its default otherwise
(`method_knobs("cure")`), critiques of up to 160 tokens.
"""
from jaxrl_reason.configs.testbed_latin import get_config as testbed_latin
from jaxrl_reason.methods import method_knobs


def get_config():
    c = testbed_latin()
    c.workdir = "runs/testbed_latin_cure"
    c.method.name = "cure"
    # the loss is CURE's own, the paper run's (methods.cure.PAPER_LOSS)
    c.method.extra = method_knobs("cure")
    # a latin_square critique after its verdict line is up to ~112 tokens under this BPE (183 under the task-text
    # one); the run refuses a budget that cuts it (methods.cure.CURE.check)
    c.method.extra.critique_max_new_tokens = 160
    # The warm-up (docs/results/cure_testbed.md, seed 0): 25% critique rows in the SFT left a 15% solver; under the
    # task-text BPE a critique is spelt from 1-3-character pieces (up to 183 tokens) and none came out well-formed.
    # A BPE trained on the critique rows shortens it to ~110 tokens; with 10% critique rows in the SFT and the
    # own-attempt stage, 78% of critiques parse and the solver keeps 45%.
    c.tokenizer.aux_corpus = True
    c.tokenizer.vocab_size = 512
    c.sft.verify_steps = 0  # CURE's verdict is the critique's, not the verify prompt's
    c.sft.aux_critique_share = 0.1
    c.data.inject_extent = "spread"  # injected errors shaped like the policy's own
    # Hint-guided re-solves in the SFT, with the guidance before the problem: in the paper's layout (problem,
    # guidance, instruction) the 4 x 128 model loses the grid -- 0.0% right under the guided prompt, with or
    # without such rows -- and the rows left a 28.1% solver (44.9% without them); guidance first: 31.6% under the
    # guided prompt, 50.4% plain (seed 0, greedy; docs/results/cure_testbed.md)
    c.sft.aux_guided_share = 0.1
    c.data.guided_layout = "first"
    # then critiques and guided re-solves of its own attempts (without guided rows the guided re-solve took
    # round-1 accuracy from 41% to 11%)
    c.sft.own_attempt_steps = 400
    c.sft.own_attempt_formats = "critique,guided"
    c.sft.own_attempt_solve_share = 2.0
    c.model.max_position_embeddings = 1024  # a critique prompt is ~180 tokens under this BPE, then its critique
    c.rl.samples_per_prompt = 4  # K, as in the paper run
    return c
