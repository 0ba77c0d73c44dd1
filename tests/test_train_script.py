"""What experiments/train.py runs (`jaxrl_reason.experiment`): the data split gives exactly n distinct held-out
questions, none seen in training; the warm-up checks refuse a run before it writes anything; every shipped config
passes the start-up checks."""
import os

import pytest

from jaxrl_reason.configs import PRESET_DIR, load_config_file
from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.data.datasets import question_key
from jaxrl_reason.experiment.config import read_run_config
from jaxrl_reason.experiment.data import build_data
from jaxrl_reason.experiment.pipeline import run, start
from jaxrl_reason.experiment.warmup import verify_contrast_fn
from jaxrl_reason.methods import METHODS

CONFIG_DIR = PRESET_DIR


def data_of(cfg):
    rc = read_run_config(cfg)
    return build_data(rc.data, rc.seed)


@pytest.mark.parametrize("heldout", [16, 128])
def test_heldout_is_exact_and_disjoint(heldout):
    cfg = tiny_default()
    cfg.data.train_size, cfg.data.heldout_size = 600, heldout
    task = data_of(cfg)
    train, held = task.train, task.heldout
    keys = [question_key(e.question) for e in held]
    assert len(held) == heldout and len(set(keys)) == heldout
    assert not set(keys) & {question_key(e.question) for e in train}
    # deterministic: the same config gives the same split
    assert [e.question for e in data_of(cfg).heldout] == [e.question for e in held]


def test_heldout_larger_than_question_space_is_an_error():
    cfg = tiny_default()
    cfg.data.min_digits = cfg.data.max_digits = 1
    cfg.data.min_operands = cfg.data.max_operands = 3
    cfg.data.train_size, cfg.data.heldout_size = 100, 5000  # 1-digit, 3-operand sums: 1,000 distinct questions
    with pytest.raises(ValueError, match="heldout_size"):
        data_of(cfg)


def test_verify_warmup_config_is_checked_before_training(tmp_path):
    cfg = tiny_default()
    cfg.workdir = str(tmp_path)
    cfg.sft.verify_steps, cfg.sft.examples, cfg.sft.verify_questions = 10, 100, 500
    with pytest.raises(ValueError, match="sft.verify_questions=500"):
        run(cfg)
    cfg.sft.steps = 0
    with pytest.raises(ValueError, match="sft.steps > 0"):
        run(cfg)
    cfg.sft.steps, cfg.sft.verify_steps = 10, -1  # not read as "off"
    with pytest.raises(ValueError, match="sft.verify_steps=-1 must be >= 0"):
        run(cfg)
    assert not os.listdir(tmp_path)  # refused before writing anything


def test_verify_contrast_config_is_checked_before_training(tmp_path):
    cfg = tiny_default()
    cfg.workdir = str(tmp_path)
    cfg.sft.verify_steps = 10
    assert verify_contrast_fn(read_run_config(cfg)) is None  # the default: self-labelled rows only
    cfg.sft.verify_contrast = "slips"
    slip = verify_contrast_fn(read_run_config(cfg))
    ex = data_of(cfg).train[0]
    assert slip(ex, __import__("numpy").random.default_rng(0)) != ex.solution
    cfg.sft.verify_contrast, cfg.sft.verify_samples = "none", 0
    with pytest.raises(ValueError, match="verify_samples=0 must be >= 1.*verify_contrast='slips'"):
        run(cfg)
    cfg.sft.verify_samples = 4
    cfg.sft.verify_contrast = "typos"
    with pytest.raises(ValueError, match="verify_contrast='typos' is unknown"):
        run(cfg)
    cfg.sft.verify_contrast, cfg.data.solution_style = "slips", "columns"
    with pytest.raises(ValueError, match="solution_style 'compact' or 'rewrite'"):
        run(cfg)
    cfg.data.source = "code"
    with pytest.raises(ValueError, match="needs data.source='arithmetic'"):
        run(cfg)
    assert not os.listdir(tmp_path)  # refused before writing anything


CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith(".py") and not f.startswith("_"))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_passes_the_checks_run_does_before_training(name):
    """A config that inherits a knob its parent needs (e.g. the verification warm-up of rlv.py) from a child that
    drops what the knob needs (its SFT slice) must be caught here, not at launch on an accelerator; so must a key
    no section knows."""
    cfg = load_config_file(os.path.join(CONFIG_DIR, name))
    rc, method = start(cfg)
    assert rc.workdir and rc.method.name in METHODS and method.name == rc.method.name


def test_config_files_need_no_sys_path_edits():
    """A config shares its base through the package (jaxrl_reason.configs), not by putting its directory on
    sys.path."""
    for name in CONFIGS:
        assert "sys.path" not in open(os.path.join(CONFIG_DIR, name)).read(), name
