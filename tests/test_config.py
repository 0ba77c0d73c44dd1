"""One source of truth per knob: every section of a run config is typed, every knob is reachable from the command
line, and a misspelt knob in any section stops the run at start-up -- before the workdir exists, let alone a warm-up
-- with a message that names the key, a close match and the valid keys."""
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from jaxrl_reason.configs import config_path, load_config_file
from jaxrl_reason.configs.rlv import get_config as rlv
from jaxrl_reason.configs.tiny_default import get_config as tiny_default
from jaxrl_reason.experiment.config import RunConfig, default_config, read_run_config
from jaxrl_reason.experiment.pipeline import run
from jaxrl_reason.knobs import UnknownKnobError
from jaxrl_reason.methods import make_method
from jaxrl_reason.train.trainer import TrainerConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_UP_S = 10  # generous for a loaded CI machine; the checks themselves take milliseconds


def misspell(cfg, section: str, key: str, value):
    """cfg with `value` under `section.key`, as a config file would write it (`c.method.extra.verify_weigth = 1.0`)."""
    node = cfg
    for part in section.split("."):
        node = node[part]
    node[key] = value
    return cfg


# (base config, section, misspelt key, value, the knob it should have been, a valid key the message lists)
TYPOS = [
    (tiny_default, "rl", "stpes", 5, "rl.steps", "prompts_per_step"),
    (tiny_default, "rl", "logprob_chunks", 512, "rl.logprob_chunk", "keep_checkpoints"),
    (rlv, "method.extra", "verify_weigth", 1.0, "method.extra.verify_weight", "measure_verifier"),
    (tiny_default, "method.estimator_kwargs", "ddofs", 0, "method.estimator_kwargs.ddof", "scale"),
    (tiny_default, "method", "eps_hihg", 0.28, "method.eps_high", "overlong_filter"),
    (tiny_default, "data", "heldout_sise", 64, "data.heldout_size", "answer_extraction"),
    (tiny_default, "sft", "verify_step", 10, "sft.verify_steps", "verify_contrast"),
    (tiny_default, "model", "hidden", 64, "model.hidden_size", "remat"),
    (tiny_default, "parallel", "mesh", {"fsdp": 2}, "parallel.mesh_shape", "distributed"),
]


@pytest.mark.parametrize("base,section,key,value,meant,listed", TYPOS, ids=[f"{t[1]}.{t[2]}" for t in TYPOS])
def test_a_misspelt_knob_fails_at_start_up_naming_it_and_the_valid_keys(tmp_path, base, section, key, value, meant,
                                                                         listed):
    cfg = misspell(base(), section, key, value)
    cfg.workdir = str(tmp_path / "run")
    t = time.time()
    with pytest.raises(UnknownKnobError) as err:
        run(cfg)
    assert time.time() - t < START_UP_S
    message = str(err.value)
    assert f"{section}.{key}" in message and f"did you mean {meant}?" in message and listed in message, message
    assert not os.path.exists(cfg.workdir)  # refused before the workdir, the data or any warm-up


def test_a_misspelt_top_level_key_fails_too(tmp_path):
    cfg = tiny_default()
    cfg.workdir, cfg.sed = str(tmp_path / "run"), 3
    with pytest.raises(UnknownKnobError, match=r"sed \(did you mean seed\?\).*valid keys of the config's top level"):
        run(cfg)


def test_a_bad_decode_weights_value_names_the_knob_and_its_values(tmp_path):
    cfg = tiny_default()
    cfg.workdir, cfg.model.decode_weights = str(tmp_path / "run"), "per-layer"
    with pytest.raises(ValueError, match=r"model\.decode_weights='per-layer' is not one of "
                                         r"\('gathered', 'per_layer'\)"):
        run(cfg)
    assert not os.path.exists(cfg.workdir)


def test_make_method_checks_extra_and_estimator_kwargs_separately():
    """make_method no longer splats both into one constructor call unchecked (a typo there used to surface as a
    TypeError from the estimator at the first advantage computation, after the SFT warm-up)."""
    section = rlv().method.to_dict()
    with pytest.raises(UnknownKnobError, match=r"method\.extra\.verify_weigth .*\(method 'rlv'\) are: balance, "
                                               r"max_verify_rows, measure_verifier, verify_weight$"):
        make_method({**section, "extra": {**section["extra"], "verify_weigth": 2.0}})
    with pytest.raises(UnknownKnobError, match=r"method\.estimator_kwargs\.ddofs .*\(estimator 'grpo'\) are: ddof, "
                                               r"eps, scale$"):
        make_method({**section, "estimator_kwargs": {"ddofs": 0}})
    # an estimator's option is not a method knob, and the other way round
    with pytest.raises(UnknownKnobError, match=r"method\.extra\.ddof"):
        make_method({**section, "extra": {"ddof": 0}})
    with pytest.raises(UnknownKnobError, match=r"method\.estimator_kwargs\.verify_weight; .*'rloo'\) are: \(none\)"):
        make_method({**section, "estimator": "rloo", "estimator_kwargs": {"verify_weight": 1.0}})
    # the partial's own keyword is its identity: dr_grpo's scale cannot be passed again
    with pytest.raises(UnknownKnobError, match=r"estimator_kwargs\.scale"):
        make_method({**section, "estimator": "dr_grpo", "estimator_kwargs": {"scale": "group"}})
    m = make_method({**section, "estimator_kwargs": {"ddof": 0}, "extra": {**section["extra"], "verify_weight": 0.5}})
    assert m.verify_weight == 0.5 and m.estimator_kwargs == {"ddof": 0}


def test_the_trainer_script_stops_on_a_misspelt_knob_within_seconds(tmp_path):
    """End to end through experiments/train.py: a config file with `c.method.extra.verify_weigth = 1.0`."""
    config = tmp_path / "typo.py"
    config.write_text("from jaxrl_reason.configs.rlv import get_config as rlv\n\n\n"
                      "def get_config():\n    c = rlv()\n    c.method.extra.verify_weigth = 1.0\n    return c\n")
    workdir = tmp_path / "run"
    t = time.time()
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "train.py"), f"--config={config}",
                          f"--config.workdir={workdir}"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    seconds = time.time() - t
    assert out.returncode != 0 and "unknown config key method.extra.verify_weigth" in out.stderr, out.stderr[-2000:]
    assert "did you mean method.extra.verify_weight?" in out.stderr
    assert not workdir.exists()
    assert seconds < 60, seconds  # interpreter + JAX import; the check itself is immediate


def test_every_trainer_field_is_a_knob_of_the_rl_section_and_settable_from_the_command_line():
    fields = {f.name for f in dataclasses.fields(TrainerConfig)} - {"seed"}  # the run's top-level seed
    assert set(default_config().rl) == fields
    path = config_path("tiny_default")
    cfg = load_config_file(path, ["--config.rl.keep_checkpoints=5", "--config.rl.logprob_chunk=256",
                                  "--config.rl.eval_max_new_tokens=32", "--config.rl.shuffle_mini_batches=False",
                                  "--config.rl.head_at_trained_only=False", "--config.rl.log_every=3",
                                  "--config.seed=7", "--config.method.estimator_kwargs={'ddof': 0}"])
    rc = read_run_config(cfg)
    assert (rc.rl.keep_checkpoints, rc.rl.logprob_chunk, rc.rl.eval_max_new_tokens, rc.rl.log_every) == (5, 256, 32, 3)
    assert not rc.rl.shuffle_mini_batches and not rc.rl.head_at_trained_only
    assert rc.rl.seed == rc.seed == 7 and dict(rc.method.estimator_kwargs) == {"ddof": 0}
    with pytest.raises(AttributeError, match="stpes"):  # ml_collections refuses an unknown override itself
        load_config_file(path, ["--config.rl.stpes=5"])


def test_defaults_are_written_once():
    """The run's knobs default to their typed sections: an unset Optional number is 0 in the ConfigDict and None
    in the typed config; the tiny default departs from TrainerConfig only where its preset says so."""
    rc = read_run_config(default_config())
    assert dataclasses.replace(rc, method=RunConfig().method) == RunConfig()
    assert rc.method.loss.max_len == rc.rl.max_new_tokens  # method.max_len=0 means the completion budget
    assert default_config().rl.logprob_chunk == 0 and rc.rl.logprob_chunk is None and rc.method.loss.dual_clip is None
    tiny = read_run_config(tiny_default())
    departs = {f.name for f in dataclasses.fields(TrainerConfig) if getattr(tiny.rl, f.name) != getattr(rc.rl, f.name)}
    assert departs == {"steps", "max_new_tokens", "temperature", "lr", "warmup_steps", "checkpoint_every",
                       "eval_every", "eval_batch_size"}
    assert dict(rlv().method.extra) == {"verify_weight": 1.0, "balance": "subsample", "max_verify_rows": 0,
                                        "measure_verifier": True}  # RLV's constructor defaults


def test_a_method_brings_its_own_loss():
    """`method.name=cure` on a config that sets no loss trains CURE's paper loss (the class's `default_loss`), not
    GRPO's; a loss knob the config sets replaces that one knob of it; naming another policy loss starts that
    loss's own knobs from their defaults."""
    from jaxrl_reason.methods import METHODS, MethodConfig, method_loss
    from jaxrl_reason.methods.cure import CURE, PAPER_LOSS
    from jaxrl_reason.methods.grpo import PolicyLossConfig

    assert CURE.default_loss == PAPER_LOSS != PolicyLossConfig()
    for spelt in ({"name": "cure"}, MethodConfig(name="cure")):  # a section, or the typed section built by hand
        assert make_method(spelt).loss == PAPER_LOSS
    assert make_method({"name": "grpo"}).loss == PolicyLossConfig()
    cfg = tiny_default()
    cfg.method.name = "cure"
    rc = read_run_config(cfg)
    assert rc.method.loss == dataclasses.replace(PAPER_LOSS, max_len=rc.rl.max_new_tokens)
    cfg.method.beta, cfg.method.dual_clip = 0.01, 0.0  # set: CURE's loss with these two knobs changed (0 = off)
    loss = read_run_config(cfg).method.loss
    assert (loss.beta, loss.dual_clip, loss.eps_high, loss.aggregation) == (0.01, None, 0.28, "token_mean")
    gspo = method_loss("cure", {"policy_loss": "gspo"})
    assert gspo.policy_loss == "gspo" and gspo.eps_high == PolicyLossConfig().eps_high and gspo.dual_clip is None
    assert gspo.aggregation == "token_mean"  # not one of PPO-clip's own knobs: still CURE's
    assert method_loss("cure", {"policy_loss": "vanilla"}).eps_high == 0.28  # verl's name of CURE's own loss
    for name, cls in METHODS.items():
        assert make_method({"name": name}).loss == cls.default_loss, name


def test_the_trainer_script_trains_cure_s_own_loss_on_the_grpo_preset():
    """Through experiments/train.py: the GRPO preset with `--config.method.name=cure` resolves CURE's loss."""
    from jaxrl_reason.methods.cure import PAPER_LOSS

    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "train.py"), "--config", "grpo",
                          "--config.method.name=cure", "--check_only"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    method = __import__("json").loads(out.stdout)["method"]
    assert method["name"] == "cure"
    for knob in ("aggregation", "eps_low", "eps_high", "dual_clip", "beta", "policy_loss"):
        assert method[knob] == getattr(PAPER_LOSS, knob), knob
