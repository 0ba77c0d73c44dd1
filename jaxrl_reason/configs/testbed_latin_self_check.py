"""The union `self_check` (docs/methods/union.md) on the 4x4 Latin-square testbed: one policy trained to solve,
verify (RL^V), critique with a hint-guided re-solve and replay (CURE) and correct its own attempts (CIPO), in one
fused update. Its warm-up teaches every prompt a part trains, each as that part's own testbed preset does:

  verify     the self-labelled verification warm-up of `testbed_latin` (sft.verify_steps = 400);
  critique   `testbed_latin_cure`'s: BPE trained on the critique rows, 10% critique and 10% guided rows in the SFT,
             guidance before the problem, then critiques and guided re-solves of its own attempts;
  correct    `testbed_latin_cipo`'s correction rows of injected wrong attempts spread like the policy's own,
             here 10% of the SFT (CIPO's preset: 25%) [choice, unmeasured] so that the solve rows stay the
             majority (80%) with three kinds of auxiliary rows.

The RL step: 8 prompts x K = 4 solves (CURE's paper K; CIPO's testbed preset has 8), a critique batch of Q*K/2 = 16
with M = 4 guided re-solves each, one replay prompt per query with G' = 4 corrections, verify rows balanced over
the batch; every other knob at its part's default (`method_knobs("self_check")`), the loss the union's own (CURE's
paper loss). Any subset of the parts is this preset with a weight at 0 (`--config.method.extra.correct_weight=0`).
"""
from jaxrl_reason.configs.testbed_latin import get_config as testbed_latin
from jaxrl_reason.configs.testbed_latin_cure import get_config as testbed_latin_cure
from jaxrl_reason.methods import method_knobs


def get_config():
    c = testbed_latin_cure()
    c.workdir = "runs/testbed_latin_self_check"
    c.method.name = "self_check"
    c.method.extra = method_knobs("self_check")
    c.method.extra.critique_max_new_tokens = 160  # testbed_latin_cure's: a critique after its verdict is ~112
    c.method.extra.correction_samples = 4  # G', testbed_latin_cipo's
    c.sft.verify_steps = testbed_latin().sft.verify_steps  # the verify part's warm-up, which CURE's preset drops
    c.sft.aux_correct_share = 0.1
    c.sft.own_attempt_formats = "critique,guided,correct"
    # The verification warm-up before the own-attempt stage: run last (the default order), its 400 steps of
    # Yes/No verdicts left a policy whose critiques open with "Yes"/"No" and never parse (0 of 8 well-formed at
    # test time, seed 0, 2026-12-07), while RL^V's verify term keeps training the verdict during RL anyway.
    c.sft.stage_order = "verify,check,own_attempts"
    return c
