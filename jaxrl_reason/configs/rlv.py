"""GRPO^V on the CPU default task: the policy also learns to verify its own solutions (RL^V, docs/methods/rlv.md#spec).

    python experiments/train.py --config jaxrl_reason/configs/rlv.py
    python experiments/train.py --config jaxrl_reason/configs/rlv.py --config.method.estimator=rloo   # RLOO^V
"""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/rlv"
    c.method.name = "rlv"
    c.method.estimator = "grpo"  # grpo -> GRPO^V, rloo -> RLOO^V, dr_grpo -> Dr.GRPO^V
    # RLV's own knobs at their defaults (verify_weight = lambda in J = J_RL + lambda * J_verify, balance,
    # max_verify_rows, measure_verifier: methods/rlv.py), so that each is settable as --config.method.extra.<knob>
    c.method.extra = method_knobs("rlv")
    # Depth: on this task the default 3-layer, 96-wide model reached 55-68% balanced accuracy on its own samples
    # however long it trained; 6 layers x 128 reached 94% -- by predicting which *questions* it gets wrong (AUROC
    # within a question ~0.5; with balance="per_question" it learns nothing). See README, RL^V on the CPU default.
    c.model.hidden_size = 128
    c.model.num_hidden_layers = 6
    c.model.intermediate_size = 384
    # The verifier learns from a policy that solves: after 300 SFT steps (12% greedy) the verify warm-up's verifier
    # was at chance on fresh samples; after 700 (88%) it was at 88%.
    c.sft.steps = 700
    # Without it the warmed-up solver has never seen the verify prompt: P("Yes") ~ 3e-5, the verify term's gradient
    # is ~50x GRPO's and clipping leaves RL almost nothing (train accuracy fell 0.47 -> 0.27 in 100 steps).
    c.sft.verify_steps = 800  # self-labelled verification warm-up (train/verify_warmup.py)
    c.sft.verify_questions = 2048  # the verifier needs thousands of labelled samples, not hundreds
    c.sft.verify_samples = 8
    # Self-labelled rows teach this model which *questions* it fails (within-question AUROC 0.47). Contrast pairs
    # alone (sft.verify_contrast="slips", verify_samples=0) leave only the solution to read, but 4,000 + 2,000 steps
    # of them reached 54-56% on held-out pairs, and the solve rows alongside made the policy 98.8% right (nothing
    # left to rank). README, RL^V, "Contrast pairs".
    c.sft.verify_lr = 2e-3
    return c
