"""GRPO^V on the graph-path testbed, where checking a solution (every hop a listed edge) is easier than producing
one (the first hop needs a search from the goal): docs/tasks/testbed.md. Sized for 2 CPU cores; its run time
and numbers are in docs/results/testbed.md: its 4 x 128 policy samples ~0% right (it never learns to look an edge
up), so the RL^V arms use configs/testbed_latin.py, which builds on this preset.

    python experiments/train.py --config jaxrl_reason/configs/testbed_rlv.py
"""

from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/testbed_rlv"
    c.data.source = "graph_path"
    c.data.graph_arms = 3  # a guessed first hop is right 1 time in 3: the target band is 30-70% sampled accuracy
    c.data.graph_arm_len = 3
    c.data.train_size = 8000
    c.method.name = "rlv"
    c.method.estimator = "grpo"
    c.method.extra = method_knobs("rlv")
    c.model.hidden_size = 128
    c.model.num_hidden_layers = 4
    c.model.intermediate_size = 384
    c.sft.steps = 500
    c.sft.examples = 4000
    # A from-scratch model has never seen the verify prompt; these rows teach its format during the warm-up
    # (instruct models in the papers already follow such prompts). GRPO^V needs only the verify format. Critique
    # and correction rows (sft.aux_critique_share / aux_correct_share, for CURE / CIPO) are ~600 and ~300 tokens
    # under the task-trained BPE (their English instructions encode near byte-level) against ~130 for a solve row,
    # so one in a batch pads it to that length: the warm-up measured 3.4 s/step with all three at 0.25.
    c.sft.aux_verify_share = 0.25
    c.model.max_position_embeddings = 1024  # a critique row (prompt + target) is ~600 tokens
    c.rl.steps = 100
    c.rl.max_new_tokens = 40  # three hops and the boxed path are ~25 tokens
    c.rl.eval_every = 50
    return c
