"""experiments/train.py's data split: exactly n distinct held-out questions, none of them seen in training."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "experiments"))
import train as train_script  # noqa: E402
from configs import tiny_default  # noqa: E402

from jaxrl_reason.data.datasets import question_key  # noqa: E402


@pytest.mark.parametrize("heldout", [16, 128])
def test_heldout_is_exact_and_disjoint(heldout):
    cfg = tiny_default.get_config()
    cfg.data.train_size, cfg.data.heldout_size = 600, heldout
    train, held, _, _ = train_script.build_data(cfg)
    keys = [question_key(e.question) for e in held]
    assert len(held) == heldout and len(set(keys)) == heldout
    assert not set(keys) & {question_key(e.question) for e in train}
    # deterministic: the same config gives the same split
    assert [e.question for e in train_script.build_data(cfg)[1]] == [e.question for e in held]


def test_heldout_larger_than_question_space_is_an_error():
    cfg = tiny_default.get_config()
    cfg.data.min_digits = cfg.data.max_digits = 1
    cfg.data.min_operands = cfg.data.max_operands = 3
    cfg.data.train_size, cfg.data.heldout_size = 100, 5000  # 1-digit, 3-operand sums: 1,000 distinct questions
    with pytest.raises(ValueError, match="heldout_size"):
        train_script.build_data(cfg)


def test_verify_warmup_config_is_checked_before_training(tmp_path):
    cfg = tiny_default.get_config()
    cfg.workdir = str(tmp_path)
    cfg.sft.verify_steps, cfg.sft.examples, cfg.sft.verify_questions = 10, 100, 500
    with pytest.raises(ValueError, match="sft.verify_questions=500"):
        train_script.run(cfg)
    cfg.sft.steps = 0
    with pytest.raises(ValueError, match="sft.steps > 0"):
        train_script.run(cfg)
    assert not os.listdir(tmp_path)  # refused before writing anything


def test_verify_contrast_config_is_checked_before_training(tmp_path):
    cfg = tiny_default.get_config()
    cfg.workdir = str(tmp_path)
    cfg.sft.verify_steps = 10
    assert train_script.verify_contrast_fn(cfg) is None  # the default: self-labelled rows only
    cfg.sft.verify_contrast = "slips"
    slip = train_script.verify_contrast_fn(cfg)
    ex = train_script.build_data(cfg)[0][0]
    assert slip(ex, __import__("numpy").random.default_rng(0)) != ex.solution
    cfg.sft.verify_contrast, cfg.sft.verify_samples = "none", 0
    with pytest.raises(ValueError, match="verify_samples=0 must be >= 1.*verify_contrast='slips'"):
        train_script.run(cfg)
    cfg.sft.verify_samples = 4
    cfg.sft.verify_contrast = "typos"
    with pytest.raises(ValueError, match="verify_contrast='typos' is unknown"):
        train_script.run(cfg)
    cfg.sft.verify_contrast, cfg.data.solution_style = "slips", "columns"
    with pytest.raises(ValueError, match="solution_style 'compact' or 'rewrite'"):
        train_script.run(cfg)
    cfg.data.source = "code"
    with pytest.raises(ValueError, match="needs data.source='arithmetic'"):
        train_script.run(cfg)
    assert not os.listdir(tmp_path)  # refused before writing anything


CONFIGS = sorted(f[:-3] for f in os.listdir(os.path.join(os.path.dirname(__file__), "..", "experiments", "configs"))
                 if f.endswith(".py") and not f.startswith("_"))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_shipped_config_passes_the_checks_run_does_before_training(name):
    """A config that inherits a knob its parent needs (e.g. the verification warm-up of rlv.py) from a child that
    drops what the knob needs (its SFT slice) must be caught here, not at launch on an accelerator."""
    import importlib

    cfg = importlib.import_module(f"configs.{name}").get_config()
    train_script.check_verify_warmup(cfg)
    assert cfg.workdir and cfg.method.name in ("grpo", "rlv", "cure")
