"""Train a reasoner with RL from verifiable rewards.

    python experiments/train.py                                            # the embedded CPU default
    python experiments/train.py --config grpo --config.rl.steps=20         # a preset, by name
    python experiments/train.py --config jaxrl_reason/configs/grpo.py      # the same preset, by path
    python experiments/train.py --config my_config.py --config.workdir=/tmp/run
    python experiments/train.py --config grpo --config.method.name=cure --check_only   # print the resolved config

A preset is one module of jaxrl_reason/configs/, named by its file name; any other file with a get_config() is
named by its path.

Phases (`jaxrl_reason.experiment.pipeline.run`): config check -> (tokenizer) -> (model) -> optional SFT and
verification warm-ups -> held-out accuracy -> RL -> held-out accuracy, then a table, a reward/accuracy plot and the
final checkpoint in Hugging Face format (`<workdir>/final`). A workdir that already holds a run resumes it.

Every knob of every section is settable as `--config.<section>.<knob>=value`; its default and meaning are in the
section's typed config (jaxrl_reason/experiment/config.py). A key no section knows -- a misspelt knob in the config
file or on the command line -- stops the run at start-up, naming the key and the valid ones.
"""
from __future__ import annotations

import json
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.configs import config_argv, config_path  # noqa: E402
from jaxrl_reason.experiment.config import run_config_dict  # noqa: E402
from jaxrl_reason.experiment.pipeline import run, start  # noqa: E402

sys.argv = config_argv(sys.argv)  # a preset's name -> its file, before the flag below reads a path
_CONFIG = config_flags.DEFINE_config_file(
    "config", config_path("tiny_default"), "A preset's name (jaxrl_reason/configs/<name>.py) or a config file's path.")
_CHECK_ONLY = flags.DEFINE_bool(
    "check_only", False, "Run the start-up checks, print the config as the run resolves it (every knob, the "
    "method's own loss filled in) as JSON, and exit before touching a device or the workdir.")


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    if _CHECK_ONLY.value:
        rc, _ = start(_CONFIG.value)
        print(json.dumps(run_config_dict(rc), indent=1, sort_keys=True))
        return
    run(_CONFIG.value)


if __name__ == "__main__":
    app.run(main)
