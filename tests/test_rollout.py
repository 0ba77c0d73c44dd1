"""Multi-turn rollouts with tools: continuing from the KV cache samples exactly what re-prefilling the conversation
samples, environment tokens carry no loss and no pi_old, max_turns and the token budget stop a row, tools turn
hostile calls into messages, the trainer trains GRPO on multi-turn rows and resumes them exactly, and RL^V, CURE,
CIPO and their union train on them with every environment token out of the loss (PPO and VinePPO refused)."""
import json
import threading
import time

import jax
import numpy as np
import pytest

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.methods.base import tool_rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, solve_rows
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rl.losses import objective, pg_spec
from jaxrl_reason.rl.scoring import completion_logprobs
from jaxrl_reason.rollout import (TOOLS, Step, ToolConfig, ToolEnv, ToolResult, make_tool, multi_turn_sample,
                                  register_tool, step_all)
from jaxrl_reason.rollout.multiturn import env_turn_ids
from jaxrl_reason.train.trainer import Trainer, TrainerConfig

from tiny import ARITH, arith_tokenizer, tiny_model

OBS = "obs 7 8"
TEMPERATURE = 0.9


class AlwaysCalls:
    """An environment whose "calls" are any turn ending in a digit 1-3 (a random tiny model writes them often):
    every call gets the same observation, so multi-turn rows appear without a trained policy."""

    stop_strings = ("1", "2", "3")

    def __init__(self):
        self.calls, self.results = [], []

    def reset(self, example):
        return "Q: " + example.question

    def step(self, text):
        self.calls.append(text)
        self.results.append(ToolResult(OBS, True))
        return Step(OBS, False)


def cfg(**kw):
    base = dict(tools=("calculator",), max_turns=3, max_turn_tokens=16, max_obs_tokens=24, chunk_steps=4)
    return ToolConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tok = arith_tokenizer(tmp_path_factory.mktemp("tok"))
    return tok, tiny_model(tok, seed=1), arithmetic_examples(3, seed=0, config=ARITH)


@pytest.fixture(scope="module")
def both(setup):
    tok, model, ex = setup
    run = lambda cont: multi_turn_sample(model, tok, ex, AlwaysCalls, jax.random.PRNGKey(0),  # noqa: E731
                                         config=cfg(continue_from_cache=cont), max_tokens=100, num_samples=3,
                                         temperature=TEMPERATURE)
    return run(True), run(False)


@pytest.mark.slow  # 50 s a call on 2 shared cores (2026-12-07)
def test_cache_continuation_samples_what_reprefilling_samples(both):
    cached, fresh = both
    assert max(len(t) for t in cached.turns) >= 2  # some rows really continued after an environment turn
    assert cached.completions == fresh.completions
    assert cached.turns == fresh.turns and cached.finish == fresh.finish
    for a, b, ma, mb in zip(cached.logprobs, fresh.logprobs, cached.model_mask, fresh.model_mask):
        np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_array_equal(ma, mb)


def test_rows_mask_environment_tokens_and_keep_model_logprobs(setup, both):
    tok, model, _ = setup
    out = both[0]
    env_ids = env_turn_ids(tok, OBS, "tool", 24)
    for comp, mask, lp, turns in zip(out.completions, out.model_mask, out.logprobs, out.turns):
        at = 0
        for n_model, n_env in turns:
            assert (mask[at:at + n_model] == 1).all() and (lp[at:at + n_model] < 0).all()
            at += n_model
            assert comp[at:at + n_env] == (env_ids if n_env else [])
            assert (mask[at:at + n_env] == 0).all() and (lp[at:at + n_env] == 0).all()
            at += n_env
        assert at == len(comp)
    # pi_old of the model's tokens is a fresh forward over the whole conversation at the sampling temperature
    prompts = [out.prompts[i] for i in out.prompt_index]
    ref = completion_logprobs(model, None, prompts, out.completions, temperature=TEMPERATURE)
    for r, lp, mask in zip(ref, out.logprobs, out.model_mask):
        np.testing.assert_allclose(lp[mask == 1], r[mask == 1], atol=1e-5)


def test_environment_tokens_leave_loss_and_ratio_untouched(setup, both):
    tok, _, ex = setup
    out = both[0]
    reward = lambda texts, exs: RewardResult(np.array([len(t) % 2 for t in texts], np.float32),  # noqa: E731
                                             [{} for _ in texts])
    ro, _ = tool_rollouts(out, ex, reward=reward)
    batch, _ = solve_rows(ro, np.linspace(-1, 1, 9).reshape(3, 3), PolicyLossConfig(), pad_id=tok.pad_id)
    env = np.zeros(batch.tokens.shape, bool)
    for i, (p, m) in enumerate(zip([out.prompts[j] for j in out.prompt_index], out.model_mask)):
        env[i, len(p):len(p) + len(m)] = m == 0
    assert env.any() and (batch.loss_mask[env] == 0).all()
    terms = (pg_spec(aggregation="seq_mean_token_mean"),)
    logprobs = np.asarray(batch.old_logprobs) + np.random.default_rng(0).normal(0, 0.3, batch.tokens.shape)
    logprobs = logprobs.astype(np.float32)
    loss, metrics = objective(logprobs, batch, terms)
    noisy = batch._replace(old_logprobs=np.where(env, -7.0, batch.old_logprobs).astype(np.float32),
                           advantages=np.where(env, 5.0, batch.advantages).astype(np.float32))
    loss2, metrics2 = objective(np.where(env, -9.0, logprobs).astype(np.float32), noisy, terms)
    assert float(loss) == float(loss2)
    for k in metrics:
        assert float(metrics[k]) == float(metrics2[k]), k
    # the same change on model tokens does move the loss (the check above can fail)
    model_tok = batch.loss_mask > 0
    loss3, _ = objective(np.where(model_tok, logprobs - 0.5, logprobs).astype(np.float32), batch, terms)
    assert float(loss3) != float(loss)


def test_max_turns_and_budget_stop_rows(setup):
    tok, model, ex = setup
    one = multi_turn_sample(model, tok, ex, AlwaysCalls, jax.random.PRNGKey(0), config=cfg(max_turns=1),
                            max_tokens=100, num_samples=3, temperature=TEMPERATURE)
    assert all(len(t) == 1 and t[0][1] == 0 for t in one.turns)
    assert "max_turns" in one.finish and set(one.finish) <= {"max_turns", "eos", "length"}
    assert all(c == 0 for c, f in zip(one.calls, one.finish) if f == "max_turns")  # its last call is not run
    small = multi_turn_sample(model, tok, ex, AlwaysCalls, jax.random.PRNGKey(0), config=cfg(), max_tokens=30,
                              num_samples=3, temperature=TEMPERATURE)
    assert "budget" in small.finish
    assert all(len(c) <= 30 for c in small.completions)
    assert max(len(c) for c in small.completions) > 16  # an environment turn was appended inside the budget


# ------------------------------------------------------------------------------------------------ tools


def test_calculator_is_exact_and_refuses_everything_else():
    calc = make_tool("calculator")
    assert calc("123456789 * 987654321") == ToolResult(str(123456789 * 987654321), True)
    assert calc("(7 - 10) // 2 + 2**10") == ToolResult(str((7 - 10) // 2 + 2 ** 10), True)
    for hostile in ("__import__('os').system('ls')", "10**10**10", "1/0", "x + 1", "(" * 500, "9" * 300 + "*9"):
        r = calc(hostile)
        assert not r.ok and r.text.startswith("error") and len(r.text) <= 200


def test_python_tool_contains_hostile_calls_as_short_messages():
    py = make_tool("python", timeout_s=3.0, max_chars=120)
    assert py("print(2**100)") == ToolResult(str(2 ** 100), True)
    cases = {"while True: pass": "timed out", "raise ValueError('boom')": "ValueError: boom",
             "print('x' * 10**7)": "output", "import os; os.kill(os.getpid(), 9)": "died",
             "open('/etc/passwd_new', 'w').write('x')": "error"}
    for code, expect in cases.items():
        r = py(code)
        assert not r.ok and expect in r.text and len(r.text) <= 120, (code, r)
    # a fenced block runs without its fence; output is bounded
    assert py("```python\nprint(1+1)\n```").text == "2"
    r = py("print('y' * 1000)")
    assert r.ok and len(r.text) <= 120 and "more chars" in r.text


def test_env_parses_calls_and_a_user_tool_registers_by_name():
    @register_tool("shout_test")
    class Shout:
        def __call__(self, args):
            if args == "crash":
                raise RuntimeError("bug in the user tool")
            return ToolResult(args.upper(), True)

    assert TOOLS["shout_test"] is Shout
    env = ToolEnv([Shout(), make_tool("calculator")], lambda q: f"Solve {q}")
    assert "<shout_test>" in env.reset(arithmetic_examples(1, seed=0, config=ARITH)[0])
    assert set(env.stop_strings) == {"</shout_test>", "</calculator>"}
    assert env.step("first <calculator>2+3</calculator>") == Step("5", False)
    assert env.step("<shout_test>hi</shout_test>") == Step("HI", False)
    assert env.step("<shout_test>crash</shout_test>").observation.startswith("error: the shout_test tool failed")
    assert env.step("the answer is \\boxed{5}") == Step(None, True)
    assert [c.tool for c in env.calls] == ["calculator", "shout_test", "shout_test"]
    assert [r.ok for r in env.results] == [True, True, False]
    with pytest.raises(ValueError, match="unknown tool"):
        ToolConfig(tools=("no_such_tool",))


def test_slow_calls_run_concurrently():
    class Slow:
        name = "slow"

        def __call__(self, args):
            time.sleep(0.5)
            return ToolResult(str(threading.get_ident()), True)

    envs = [ToolEnv([Slow()], str) for _ in range(6)]
    t0 = time.perf_counter()
    steps = step_all(envs, ["<slow>x</slow>"] * 5 + [None])
    assert time.perf_counter() - t0 < 1.5  # 6 x 0.5 s one after another would be 2.5 s
    assert steps[-1] is None and all(s.observation for s in steps[:5])


# ------------------------------------------------------------------------------------------------ trainer


def parity_reward(texts, examples):
    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])


def tool_trainer(tok, workdir, steps=2, method=None):
    model = tiny_model(tok, seed=3)
    train = arithmetic_examples(32, seed=7, config=ARITH)
    c = TrainerConfig(steps=steps, prompts_per_step=2, samples_per_prompt=4, max_new_tokens=60, lr=1e-3,
                      checkpoint_every=1, progress=False, seed=11)
    method = GRPO("grpo", PolicyLossConfig()) if method is None else method
    tr = Trainer(model, tok, method, train, parity_reward, c, workdir, tools=cfg())
    tr._make_env = AlwaysCalls  # a random policy never writes <calculator>...</calculator>
    return tr


@pytest.mark.slow  # 91 s a call on 2 shared cores (2026-12-07)
def test_grpo_trains_on_multi_turn_rows_and_resumes_exactly(setup, tmp_path):
    tok = setup[0]
    full = tool_trainer(tok, str(tmp_path / "a"))
    ref = full.run()
    full.close()
    assert all(r["tools/env_token_frac"] > 0 and r["tools/turns_mean"] > 1 and r["grad_norm"] > 0 for r in ref)
    part = tool_trainer(tok, str(tmp_path / "b"))
    first = part.run(stop_after=1)
    part.close()
    resumed = tool_trainer(tok, str(tmp_path / "b"))
    assert int(resumed.state.step) == 1
    rest = resumed.run()
    resumed.close()
    for a, b in zip(ref, first + rest):
        for k in ("loss/pg", "reward/mean", "length/mean", "grad_norm", "tools/env_token_frac"):
            assert a[k] == b[k], (k, a[k], b[k])
    logged = [json.loads(x) for x in open(tmp_path / "b" / "logs" / "metrics.jsonl")]
    assert [r["step"] for r in logged] == [1, 2]


@pytest.fixture(scope="module")
def check_tok(tmp_path_factory):
    """A tokenizer that also knows the self-checking prompts: the verdicts "Yes" / "No" must be single tokens."""
    from jaxrl_reason.data.prompts import correction_prompt, critique_prompt, guided_prompt, verify_prompt
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer

    ex = arithmetic_examples(30, seed=1, config=ARITH)
    texts = [solve_prompt(e.question) for e in ex] + [e.solution for e in ex]
    for make in (critique_prompt, correction_prompt, verify_prompt):
        texts += [make(e.question, e.solution) for e in ex]
    texts += [guided_prompt(e.question, "add the numbers") for e in ex]
    texts += ["ERROR_FOUND: true\nERROR_QUOTE: x\nWHY_IT_MATTERS: y\nHIGH_LEVEL_HINT: add the numbers"] * 5
    return train_tiny_tokenizer(texts, str(tmp_path_factory.mktemp("checktok")), vocab_size=640)


class CallsOften(AlwaysCalls):
    """AlwaysCalls for a larger vocabulary, where a random model writes digits more rarely."""

    stop_strings = ("1", "2", "3", "e", "a", "o")


def self_checking(name):
    from jaxrl_reason.methods.cipo import CIPO
    from jaxrl_reason.methods.cure import CURE
    from jaxrl_reason.methods.rlv import RLV
    from jaxrl_reason.methods.self_check import SelfCheck

    cure = dict(guided_samples=2, critique_batch_size=4, critique_max_new_tokens=8, guided_max_new_tokens=8)
    cipo = dict(correction_samples=2, correction_max_new_tokens=8)
    return {"rlv": lambda: RLV(measure_verifier=False, balance="none"), "cure": lambda: CURE(**cure),
            "cipo": lambda: CIPO(**cipo),
            "self_check": lambda: SelfCheck(**cure, **cipo, measure_verifier=False, balance="none")}[name]()


AUX = {"rlv": ("verify",), "cure": ("critique", "guided_solve"), "cipo": ("correct",),
       "self_check": ("verify", "critique", "guided_solve", "correct")}


@pytest.mark.slow  # 13-52 s a method on 2 shared cores (2026-12-07)
@pytest.mark.parametrize("name", ["rlv", "cure", "cipo", "self_check"])
def test_self_checking_methods_train_on_tool_rows(check_tok, tmp_path, name):
    from jaxrl_reason.data.prompts import verify_prompt
    from jaxrl_reason.methods.base import Context
    from jaxrl_reason.rl.batch import TASKS

    tok = check_tok
    tr = tool_trainer(tok, str(tmp_path), steps=1, method=self_checking(name))
    seen = {}
    build = tr.method.build

    def spy(ro, ctx):
        seen["ro"] = ro
        return build(ro, ctx)

    tr.method.build = spy
    tr._make_env = CallsOften
    logs = tr.run()
    tr.close()
    assert logs[0]["tools/env_token_frac"] > 0 and logs[0]["grad_norm"] > 0
    assert all(np.isfinite(logs[0][f"loss/{t}"]) for t in AUX[name])
    ro = seen["ro"]
    multi = [r for r, m in enumerate(ro.token_masks) if (m == 0).any()]
    assert multi  # some rows hold environment turns
    # The same rollouts with other ids on every environment token; the same step's randomness for both builds.
    alt = ro._replace(completions=[[int(t) if k else (int(t) + 7) % tok.vocab_size for t, k in zip(c, m)]
                                   for c, m in zip(ro.completions, ro.token_masks)])
    key = jax.random.PRNGKey(5)
    sampler = lambda p, **kw: tr._sample(p, key, **kw)  # noqa: E731

    def rows(rollouts):
        ctx = Context(tok, sampler, tr._reward, np.random.default_rng(3), tok.pad_id, tr.model, tr.state.params,
                      temperature=tr._scoring_temperature(), max_new_tokens=tr.cfg.max_new_tokens, formats=tr.formats,
                      streams=lambda part: sampler)
        return build(rollouts, ctx)[0]

    a, b = rows(ro), rows(alt)
    tasks = {t: TASKS[t] for t in ("solve",) + AUX[name]}
    assert set(np.unique(a.task_id)) >= set(tasks.values())
    env = np.asarray(a.tokens) != np.asarray(b.tokens)
    assert env.any() and (np.asarray(a.loss_mask)[env] == 0).all() and (np.asarray(a.old_logprobs)[env] == 0).all()
    assert (np.asarray(a.task_id)[env.any(axis=1)] == TASKS["solve"]).all()  # no other row holds a tool turn
    # Loss and ratio untouched by the environment's tokens: other ids there, other log-probs there, same bits.
    lp = (np.asarray(a.old_logprobs) + np.random.default_rng(0).normal(0, 0.3, a.tokens.shape)).astype(np.float32)
    terms = tr.method.terms()
    loss, metrics = objective(lp, a, terms)
    loss2, metrics2 = objective(np.where(env, -9.0, lp).astype(np.float32), b, terms)
    assert float(loss) == float(loss2) and np.isfinite(float(loss))
    for k in metrics:
        assert float(metrics[k]) == float(metrics2[k]), k
    # The auxiliary rows hold the transcript the reward graded: a verify row is exactly the rendered question and
    # transcript, a critique or a correction prompt holds it verbatim; some of them come from multi-turn rows.
    g = ro.group_size
    decoded = lambda i: tok.decode(np.asarray(a.tokens[i])[np.asarray(a.segment_ids[i]) > 0].tolist())  # noqa
    for task in set(AUX[name]) - {"guided_solve"}:
        idx = np.nonzero(np.asarray(a.task_id) == TASKS[task])[0]
        assert len(idx)
        if task == "verify":
            want = {tuple(tok.encode(tok.render_prompt(verify_prompt(ro.examples[r // g].question, ro.texts[r])))):
                    r for r in range(len(ro.texts))}
            src = [want[tuple(np.asarray(a.tokens[i])[np.asarray(a.segment_ids[i]) > 0][:-1].tolist())]
                   for i in idx]
        else:
            src = [next(r for r in range(len(ro.texts)) if ro.texts[r].strip() and ro.texts[r].strip() in decoded(i))
                   for i in idx]
        assert set(src) & set(multi), task


# ------------------------------------------------------------------------------------------------ warm-up, config


def test_tool_demonstrations_train_only_the_model_text(setup):
    from jaxrl_reason.configs.tool_arithmetic import get_config
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.warmup import tool_sft_examples
    from jaxrl_reason.train.trainer import sft_rows

    tok = setup[0]
    c = get_config()
    c.data.train_size, c.data.heldout_size, c.sft.examples = 64, 8, 4
    rc = read_run_config(c)
    task = build_data(rc.data, rc.seed)
    examples, prompt_fn, spans = tool_sft_examples(rc, task, tok, task.train[:4])
    assert prompt_fn(examples[0].question).endswith("Tools: <calculator>...</calculator>.")
    batch = sft_rows(tok, examples, prompt_fn=prompt_fn, span_weights=spans)
    for i, e in enumerate(examples):
        prompt = tok.encode(tok.render_prompt(prompt_fn(e.question)))
        env = env_turn_ids(tok, e.answer, "tool", 64)
        row = batch.tokens[i].tolist()
        start = next(j for j in range(len(prompt), len(row)) if row[j:j + len(env)] == env)
        assert (batch.loss_mask[i, start:start + len(env)] == 0).all()  # the tool turn: no loss
        assert (batch.loss_mask[i, len(prompt):start] == 1).all()  # the call: trained
        assert batch.loss_mask[i, start + len(env):].sum() > 0  # the answer after it: trained


def test_tools_config_is_checked_before_compute(setup):
    from jaxrl_reason.experiment.config import default_config, read_run_config
    from jaxrl_reason.knobs import UnknownKnobError

    c = default_config()
    c.tools.max_turn_budget = 3
    with pytest.raises(UnknownKnobError, match="unknown config key tools.max_turn_budget"):
        read_run_config(c)
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        ToolConfig(tools=("calculator",), max_turns=0)
    from jaxrl_reason.methods.ppo import PPO
    from jaxrl_reason.methods.vineppo import VinePPOV

    class OwnBuild(GRPO):  # a new build that says nothing about tool rows
        def build(self, rollouts, ctx):
            return super().build(rollouts, ctx)

    tok, model, ex = setup
    for method, why in ((PPO(), "PPO.build: its critic's values and GAE"), (VinePPOV(), "VinePPO.build"),
                        (OwnBuild(), "OwnBuild.build: its build does not declare trains_tool_rows")):
        with pytest.raises(ValueError, match=f"does not train on multi-turn tool rows \\({why}"):
            Trainer(model, tok, method, ex, parity_reward, TrainerConfig(steps=1), "/tmp/unused", tools=cfg())
    from jaxrl_reason.configs.tool_arithmetic import get_config
    from jaxrl_reason.experiment.pipeline import start
    from jaxrl_reason.methods import METHODS

    run = get_config()
    run.method.name = "vineppo"  # refused by the run's start-up checks too, before the warm-up or any device
    with pytest.raises(ValueError, match="config tools.tools=\\['calculator'\\]: method 'vineppo' does not train"):
        start(run)
    run.method.name = "self_check"
    assert start(run)[1].name == "self_check"

    refused = {n for n, m in METHODS.items() if m.tool_rows_refusal()}
    assert refused == {"ppo", "ppo_v", "vineppo", "vineppo_v"}  # RL^V's, CIPO's, CURE's builds all declare it
    assert VinePPOV.tool_rows_refusal().startswith("VinePPO.build")
