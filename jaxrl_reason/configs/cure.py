"""CURE (docs/methods/cure.md#spec) on the CPU default task: solve, critique with a teacher-forced verdict, guided
re-exploration from the critique's hint, replay of guided successes into zero-pass solve groups.

    python experiments/train.py --config jaxrl_reason/configs/cure.py
    python experiments/train.py --config jaxrl_reason/configs/cure.py --config.rl.steps=2 --config.sft.steps=20

Every CURE knob is `method.extra.<knob>` at the paper run's / the authors' default (their meanings: the
constructor of jaxrl_reason/methods/cure.py; the choices: docs/methods/cure.md); below is only what this run sets
differently. The tiny model is warmed up on solutions only, so its first critiques are not well-formed: expect the
format penalty and the fixed verdict advantage to dominate the critique task early on.
"""
from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.methods import method_knobs


def get_config():
    c = tiny_default()
    c.workdir = "runs/cure"
    # A critique prompt holds the problem, a solution and the four-field instructions: ~520 tokens of the
    # task-trained BPE, plus the verdict and the critique. RoPE has no parameters, so this leaves the
    # initialisation unchanged.
    c.model.max_position_embeddings = 1024

    c.method.name = "cure"
    # the loss is CURE's own, the paper run's (token-mean aggregation, clip 0.2 / 0.28, dual-clip 10, no KL:
    # methods.cure.PAPER_LOSS, its class's default_loss)
    c.method.extra = method_knobs("cure")
    c.method.extra.critique_max_new_tokens = 48  # a compact arithmetic critique (0 would give it rl.max_new_tokens)

    c.rl.samples_per_prompt = 4  # K, as in the paper run
    return c
