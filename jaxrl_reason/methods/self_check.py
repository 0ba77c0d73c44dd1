"""The union (docs/methods/composition.md#spec-the-union, docs/methods/union.md): one policy that solves, verifies
(RL^V), critiques with a hint-guided re-solve and replay (CURE) and corrects its own attempts (CIPO), trained in
one fused update.

It is a registration, not a trainer: each part's class adds its rows after its `super().build` and its terms after
its `super().terms`, so the MRO below runs GRPO's solve rows, then CURE's (which replace the plain solve rows with
the replay-enlarged ones), then RL^V's verify rows, then CIPO's corrections. Each part draws its own randomness
and samples from its own stream (`methods.base.part_context`) and the batch is ordered by task
(`methods.base.join_rows`), so any other order of the three classes gives the same batch.

Any subset is a config: a part whose weight is 0 is off -- its rows are not built and nothing of it is sampled:
  verify_weight = 0                      no verify rows (RL^V)
  critique_weight = guided_weight = 0    no critique, no guided re-solve, no replay (CURE)
  correct_weight = 0                     no correction sampling; rho and its window stay as they are (CIPO)
With only one of CURE's two weights at 0, the critiques and guided solutions are still sampled (the guided
re-solve needs the critiques' hints, a critique's reward is its guided solutions' accuracy) but that task's rows
are not trained.

Default loss [choice]: CURE's paper loss (`cure.PAPER_LOSS`: each task's loss a token mean over its own tokens,
PPO-clip 0.2 / 0.28, dual clip 10, no KL). Why: of the three papers only CURE's authors published the loss they
ran; a per-task token mean keeps each part's loss normalised over its own tokens however long its rows are; and
the dual clip bounds the ratio of negative-advantage rows, which the union has more of than GRPO (CIPO's
regressions at -(alpha - 1), critiques of wrong samples). RL^V and CIPO state no loss of their own (GRPO's) --
`tests/test_union.py` checks the choice, and `method.<knob>` changes any of it.
"""
from __future__ import annotations

from jaxrl_reason.methods.cipo import CIPO
from jaxrl_reason.methods.cure import CURE, PAPER_LOSS
from jaxrl_reason.methods.rlv import RLV


class SelfCheck(CIPO, RLV, CURE):
    """solve + verify + critique / guided_solve / replay + correct. Its knobs are its parts' (`method_knobs`
    reads CIPO's, RL^V's and CURE's constructors), each declared once, in its own class."""

    name = "self_check"
    tasks = ("solve", "verify", "critique", "guided_solve", "correct")
    # Stated, not inherited: the MRO would give the first class's that defines one, so the union's loss would
    # change with the order of its classes.
    default_loss = PAPER_LOSS
