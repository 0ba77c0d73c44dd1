"""CIPO on the 4x4 Latin-square testbed: the task and solver warm-up of `testbed_latin`, plus correction rows
(wrong attempt -> worked solution) in the SFT warm-up so that a from-scratch model has seen the review-and-correct
prompt before CIPO trains it (the paper starts from an instruct model). The CIPO-vs-GRPO comparison runs it through

    python experiments/research/bench_cipo.py --config jaxrl_reason/configs/testbed_latin_cipo.py

Knobs scaled from the paper's run (docs/methods/cipo.md#spec: Qwen3-4B, 500 steps, G' correction rollouts per replay
prompt) to 2 CPU cores: 8 queries x G = 8 solves, one replay prompt per query with G' = 4 corrections, every other CIPO
knob at its default (`method_knobs("cipo")`). No verification warm-up: CIPO has no verify term.
"""
from jaxrl_reason.configs.testbed_latin import get_config as testbed_latin
from jaxrl_reason.methods import method_knobs


def get_config():
    c = testbed_latin()
    c.workdir = "runs/testbed_latin_cipo"
    c.method.name = "cipo"
    c.method.extra = method_knobs("cipo")
    c.method.extra.correction_samples = 4  # G'
    c.sft.verify_steps = 0
    c.sft.aux_correct_share = 0.25  # corrections of the task's own injected wrong solutions
    # ... spread like the policy's own wrong grids: with the minimal 1-2-cell errors the warmed-up policy fixed 2%
    # of its own wrong attempts (71% of injected ones), with spread ones 13% (docs/results/cipo_testbed.md)
    c.data.inject_extent = "spread"
    # a correction prompt holds the question, an attempt and the instruction (~300 tokens under the task BPE)
    c.model.max_position_embeddings = 1024
    return c
