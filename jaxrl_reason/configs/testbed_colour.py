"""GRPO^V on the graph-colouring testbed (data/graph_colour.py): colour a 6-node, 7-edge graph with r g b so that
no edge joins one colour; checking looks up both ends of each edge, solving may need to backtrack.
docs/tasks/testbed.md; its numbers are in docs/results/testbed.md.

    python experiments/train.py --config jaxrl_reason/configs/testbed_colour.py
"""

from jaxrl_reason.configs.testbed_rlv import get_config as testbed_rlv


def get_config():
    c = testbed_rlv()
    c.workdir = "runs/testbed_colour"
    c.data.source = "graph_colour"
    c.rl.max_new_tokens = 48  # six node lines and the boxed assignment are ~38 tokens
    return c
