"""CURE (METHODS.md §3) on the CPU default task: solve, critique with a teacher-forced verdict, guided
re-exploration from the critique's hint, replay of guided successes into zero-pass solve groups.

    python experiments/train.py --config experiments/configs/cure.py
    python experiments/train.py --config experiments/configs/cure.py --config.rl.steps=2 --config.sft.steps=20

The tiny model is warmed up on solutions only, so its first critiques are not well-formed: expect the format
penalty and the fixed verdict advantage to dominate the critique task early on.
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default


def get_config():
    c = tiny_default()
    c.workdir = "runs/cure"
    # A critique prompt holds the problem, a solution and the four-field instructions: ~520 tokens of the
    # task-trained BPE, plus the verdict and the critique. RoPE has no parameters, so this leaves the
    # initialisation unchanged.
    c.model.max_position_embeddings = 1024

    c.method.name = "cure"
    c.method.estimator = "grpo"  # advantages inside each task's own groups
    c.method.aggregation = "token_mean"  # each task's loss averaged over its own generated tokens
    c.method.eps_high = 0.28  # the paper run's clip-higher
    c.method.dual_clip = 10.0  # and dual-clip
    c.method.extra.guided_samples = 4  # M: guided re-solutions per critique of a wrong solution
    c.method.extra.critique_batch_size = 0  # critiques per step, half wrong / half right (0 = Q*K/2 = 16)
    c.method.extra.critique_acc_range = (0.0, 0.9)  # mixed queries whose solutions get critiqued
    c.method.extra.critique_zero_pass_floor = 0.125  # share of critiques kept for zero-pass samples (32 of 256)
    c.method.extra.replay_acc_range = (0.0, 0.0)  # zero-pass queries whose good guided solutions are replayed
    c.method.extra.max_replay_per_query = 0  # cap on replayed samples per query (0 = K, -1 = none)
    c.method.extra.critique_advantage_scale = 2.0  # c in A = c * (guided reward + format penalty - acc(x))
    c.method.extra.verdict_advantage = 1.0  # fixed advantage of the teacher-forced verdict tokens
    c.method.extra.critique_max_new_tokens = 48  # critique budget after the forced verdict
    c.method.extra.guided_max_new_tokens = 0  # guided solution budget (0 = rl.max_new_tokens)
    c.method.extra.format_penalty_missing = -0.5  # ERROR_QUOTE / WHY_IT_MATTERS missing, or a claimed error's
    #                                               quote under 5 characters
    c.method.extra.format_penalty_short_hint = -0.25  # hint missing, empty or under min_hint_words (any verdict)
    c.method.extra.min_hint_words = 10
    c.method.extra.task_pooling = "per_task"  # each task averaged over its own tokens (paper) | pooled (authors)
    c.method.extra.critique_weight = 1.0  # weight of the critique term (solve: 1)
    c.method.extra.guided_weight = 1.0  # weight of the guided_solve term
    c.method.extra.rescore_rows = 16  # rows per forward when recomputing pi_old (replay, forced verdicts)
    c.method.extra.rescore_chunk = 0  # time chunk of those forwards' logits (0 = whole)

    c.rl.samples_per_prompt = 4  # K, as in the paper run
    return c
