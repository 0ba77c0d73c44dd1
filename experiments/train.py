"""Train a reasoner with RL from verifiable rewards.

    python experiments/train.py                                            # the embedded CPU default
    python experiments/train.py --config experiments/configs/grpo.py --config.rl.steps=20
    python experiments/train.py --config experiments/configs/tiny_default.py --config.workdir=/tmp/run

Phases (`jaxrl_reason.experiment.pipeline.run`): config check -> (tokenizer) -> (model) -> optional SFT and
verification warm-ups -> held-out accuracy -> RL -> held-out accuracy, then a table, a reward/accuracy plot and the
final checkpoint in Hugging Face format (`<workdir>/final`). A workdir that already holds a run resumes it.

Every knob of every section is settable as `--config.<section>.<knob>=value`; its default and meaning are in the
section's typed config (jaxrl_reason/experiment/config.py). A key no section knows -- a misspelt knob in the config
file or on the command line -- stops the run at start-up, naming the key and the valid ones.
"""
from __future__ import annotations

import os

from absl import app, logging
from ml_collections import config_flags

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment.pipeline import run  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "tiny_default.py"),
    "Path to an ml_collections config file (get_config()).")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    run(_CONFIG.value)


if __name__ == "__main__":
    app.run(main)
