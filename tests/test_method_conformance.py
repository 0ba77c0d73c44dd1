"""The contract every registered method keeps, checked over the registry (`methods.METHODS`), so that a method added
there and breaking it fails here without a test of its own:

- its knobs are typed keywords with defaults, and a misspelt one is refused at start-up, naming the right one;
- its default loss is its class's (`default_loss`), whatever the config leaves unset;
- it declares its tasks, and every term it trains reads registered tasks that it declares; each of its policy terms
  and its KL term are what `PolicyLossConfig.terms` expands for those tasks (one place builds that pair);
- from a fake rollout (one right and one wrong solution per question, fixed rewards) it builds rows of its declared
  tasks only, which one trainer step on the tiny model trains (finite metrics, moved parameters);
- that step's state, its own host state (`state_dict`) included, round-trips a checkpoint.

One trainer, hence one compile of the update, per method; the tiny model and 8-token budgets keep it fast.
"""
import inspect
import json

import jax
import numpy as np
import pytest

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.knobs import UnknownKnobError
from jaxrl_reason.methods import METHODS, make_method, method_knobs, read_method_config
from jaxrl_reason.methods.base import Rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rl.batch import PAD_TASK_ID, TASKS, TokenBatch
from jaxrl_reason.rl.losses import TERM_KINDS
from jaxrl_reason.train.trainer import Trainer, TrainerConfig, render_solve_prompts
from tests.tiny import ARITH, arith_tokenizer, tiny_model

NAMES = sorted(METHODS)
MAX_NEW_TOKENS = 12
# Smaller budgets for the methods that generate more than the step's rollouts (critiques, guided re-solves,
# corrections, Monte-Carlo continuations): speed only. A method missing here runs at its defaults.
SMALL = {
    "cure": {"critique_max_new_tokens": 8, "guided_max_new_tokens": 8, "guided_samples": 2, "critique_batch_size": 4},
    "cipo": {"correction_samples": 2, "correction_max_new_tokens": 8},
    "cipo_v": {"correction_samples": 2, "correction_max_new_tokens": 8},
    "self_check": {"critique_max_new_tokens": 8, "guided_max_new_tokens": 8, "guided_samples": 2,
                   "critique_batch_size": 4, "correction_samples": 2, "correction_max_new_tokens": 8},
    "vineppo": {"vine_samples": 2, "max_steps": 2},
    "vineppo_v": {"vine_samples": 2, "max_steps": 2},
}


def misspelt(knob: str) -> str:
    """The knob with its last two letters swapped (or one doubled): a typo the registry must not accept."""
    return knob[:-2] + knob[-1] + knob[-2] if len(knob) > 2 and knob[-1] != knob[-2] else knob + knob[-1]


@pytest.mark.parametrize("name", NAMES)
def test_knobs_are_typed_keywords_and_a_misspelt_one_is_refused(name):
    knobs = method_knobs(name)
    init_params = {}
    for cls in METHODS[name].__mro__:
        for p in inspect.signature(vars(cls)["__init__"]).parameters.values() if "__init__" in vars(cls) else ():
            init_params.setdefault(p.name, p)
    for knob, default in knobs.items():
        p = init_params[knob]
        assert p.kind is p.KEYWORD_ONLY, f"{name}: knob {knob} must be keyword-only"
        assert p.annotation is not p.empty, f"{name}: knob {knob} has no type annotation"
        assert p.default is not p.empty, f"{name}: knob {knob} has no default"
    # every knob at its default is a valid section, and builds the method
    mc = read_method_config({"name": name, "extra": dict(knobs)})
    assert make_method(mc).name == name
    for knob in knobs:
        typo = misspelt(knob)
        if typo in knobs:
            continue
        with pytest.raises(UnknownKnobError, match=rf"method\.extra\.{typo}\b.*valid keys.*\b{knob}\b"):
            read_method_config({"name": name, "extra": {typo: knobs[knob]}})


@pytest.mark.parametrize("name", NAMES)
def test_default_loss_is_the_class_s(name):
    cls = METHODS[name]
    assert isinstance(cls.default_loss, PolicyLossConfig)
    assert make_method({"name": name}).loss == cls.default_loss
    assert cls().loss == cls.default_loss  # built directly, too
    assert make_method({"name": name, "beta": 0.5}).loss.beta == 0.5  # a knob the config sets wins


@pytest.mark.parametrize("name", NAMES)
def test_tasks_are_declared_and_every_term_reads_registered_ones(name):
    method = make_method({"name": name, "beta": 0.01})  # with a KL term too
    assert issubclass(METHODS[name], GRPO) and method.name == name
    assert method.tasks and all(t in TASKS for t in method.tasks)
    terms = method.terms()
    assert len({t.name for t in terms}) == len(terms), [t.name for t in terms]
    for t in terms:
        assert t.kind in TERM_KINDS, t
        assert t.tasks and set(t.tasks) <= set(method.tasks), (t.name, t.tasks, method.tasks)
    assert "solve" in {task for t in terms for task in t.tasks}
    # every policy term over sampled rows is the one expansion of the method's loss (PolicyLossConfig.terms): its
    # KL term covers the same tasks at beta x its weight, in its aggregation
    loss = method.loss
    policy = [t for t in terms if t.kind == loss.policy_loss]
    kls = {t.tasks: t for t in terms if t.kind == "kl"}
    assert policy and len(kls) == len(policy), [t.name for t in terms]
    for t in policy:
        assert (t,) + (kls[t.tasks],) == loss.terms(t.tasks, name=t.name, kl_name=kls[t.tasks].name,
                                                    weight=t.weight), t.name


def parity_reward(texts, examples):
    """Half the samples of a random model score 1: every group the step samples beyond the fake rollout has
    signal."""
    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])


def fake_rollouts(tokenizer, examples, prompt_fn) -> Rollouts:
    """Per question, its boxed answer (reward 1) and another question's (reward 0), as a sampler would return
    them: stop token included, a log pi_old per token."""
    prompts = render_solve_prompts(tokenizer, [e.question for e in examples], prompt_fn)
    texts, completions = [], []
    for i, e in enumerate(examples):
        for other in (e, examples[(i + 1) % len(examples)]):
            text = f"\\boxed{{{other.answer}}}"
            texts.append(text)
            completions.append(tokenizer.encode(text) + [tokenizer.stop_ids[0]])
    assert max(map(len, completions)) <= MAX_NEW_TOKENS, max(map(len, completions))
    logprobs = [np.full(len(c), -1.5, np.float32) for c in completions]
    rewards = np.tile(np.array([[1.0, 0.0]], np.float32), (len(examples), 1))
    return Rollouts(list(examples), prompts, completions, logprobs, texts, rewards, ["eos"] * len(texts),
                    [{} for _ in texts], sampling_logprobs=None)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return arith_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.mark.slow  # ~30 s a method on 2 shared cores: a compile of the update and the sampler each
@pytest.mark.parametrize("name", NAMES)
def test_rows_from_a_fake_rollout_train_one_step_and_the_state_round_trips_a_checkpoint(name, tokenizer, tmp_path):
    section = {"name": name, "extra": SMALL.get(name, {})}
    method = make_method(section)
    # the budget holds the fake completions, as it holds any sampled one (VinePPO continues them within it)
    cfg = TrainerConfig(steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=MAX_NEW_TOKENS, lr=1e-2,
                        checkpoint_every=1, progress=False, seed=3)
    trainer = Trainer(tiny_model(tokenizer, seed=1, max_positions=1024), tokenizer, method,
                      arithmetic_examples(16, seed=4, config=ARITH), parity_reward, cfg, str(tmp_path))
    trainer.rollouts = lambda examples, key: fake_rollouts(tokenizer, examples, trainer.prompt_fn)
    built = []
    build = method.build
    method.build = lambda ro, ctx: built.append(build(ro, ctx)) or built[-1]
    before = jax.tree.map(np.asarray, trainer.state.params)
    metrics = trainer.run()
    trainer.close()

    batch, method_metrics = built[0]
    assert isinstance(batch, TokenBatch)
    b, t = np.shape(batch.tokens)
    for f in ("positions", "loss_mask", "advantages", "old_logprobs"):
        assert np.shape(getattr(batch, f)) == (b, t), f
    ids = {TASKS[task] for task in method.tasks}
    rows = set(np.unique(np.asarray(batch.task_id)).tolist()) - {PAD_TASK_ID}
    assert rows and rows <= ids, (rows, ids)
    assert TASKS["solve"] in rows and np.asarray(batch.loss_mask).sum() > 0
    assert all(np.isfinite(float(v)) for v in method_metrics.values())

    (m,) = metrics
    assert all(np.isfinite(v) for v in m.values() if isinstance(v, float)), m
    assert m["grad_norm"] > 0
    moved = max(float(np.max(np.abs(np.asarray(a) - c)))
                for a, c in zip(jax.tree.leaves(trainer.state.params), jax.tree.leaves(before)))
    assert moved > 0

    assert trainer.ckpt.latest_step() == 1
    state, extra = trainer.ckpt.restore(trainer.state)
    assert int(state.step) == 1
    for a, c in zip(jax.tree.leaves(state.params), jax.tree.leaves(trainer.state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
    host = method.state_dict()
    assert json.loads(json.dumps(host)) == host  # checkpointed as JSON
    fresh = make_method(section)
    fresh.load_state_dict(extra.get("method", {}))
    assert fresh.state_dict() == host


@pytest.mark.parametrize("name", NAMES)
def test_the_start_up_check_passes_the_default_run(name, tokenizer):
    """Every method answers the pipeline's start-up hook (`check`) and accepts the default arithmetic run."""
    from jaxrl_reason.experiment.config import default_config, read_run_config
    from jaxrl_reason.experiment.data import build_data

    cfg = default_config()
    cfg.method.name, cfg.data.train_size, cfg.data.heldout_size = name, 64, 8
    rc = read_run_config(cfg)
    make_method(rc.method).check(rc, build_data(rc.data, rc.seed), tokenizer)
