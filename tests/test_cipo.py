"""CIPO (docs/methods/cipo.md#spec): replay prompts carry the source attempt verbatim; the ratio rule moves rho the
predicted way inside its bounds; shaping touches regressions only; failed sources come in the difficulty order; rho
survives a kill-and-resume through the trainer's checkpoint; updates on a correction group raise the right correction; a
Trainer run logs both streams and rho."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_reason.configs import PRESET_DIR
from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import (CODE_INSTRUCTION, SOLVE_INSTRUCTION, correction_prompt,
                                       replay_correction_prompt)
from jaxrl_reason.methods import make_method
from jaxrl_reason.methods.base import Context, RowFormats
from jaxrl_reason.methods.cipo import (CIPO, CIPOV, RatioState, rank_failed_sources, select_sources,
                                       shape_correction_rewards, update_ratio)
from jaxrl_reason.rl.batch import TASKS, build_token_batch
from jaxrl_reason.rl.scoring import completion_logprobs
from jaxrl_reason.train.trainer import Trainer, TrainerConfig
from jaxrl_reason.train.update import make_update

from tiny import (ARITH, arith_tokenizer, padded_samples, parity_reward, right_reward as reward,  # noqa: E402
                  scripted_rollouts, tiny_model)

RULE = dict(rho_min=0.1, rho_max=0.9, rho_step=0.1, tau_low=0.6, tau_high=0.9, delta=0.1, window=4)
# Q=4 x G=4: zero-pass, acc 0.25, acc 0.5, solved.
REWARDS = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]], np.float32)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    ex = arithmetic_examples(30, seed=1, config=ARITH)
    extra = [correction_prompt(e.question, e.solution) for e in ex]
    return arith_tokenizer(tmp_path_factory.mktemp("tok"), extra_texts=extra)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer, seed=3, max_positions=1024)


class ScriptedSampler:
    """Answers a replay prompt whose attempt is RIGHT with a WRONG correction on even samples (regressions), and
    one whose attempt is WRONG with a RIGHT correction on even samples (fixes)."""

    def __init__(self, tok):
        self.tok, self.prompts = tok, []

    def __call__(self, prompts, num_samples=1, max_new_tokens=64, **kw):
        self.prompts += [self.tok.decode(p) for p in prompts]
        rows = []
        for p in prompts:
            src_right = "RIGHT" in self.tok.decode(p)
            for s in range(num_samples):
                ok = (s % 2 == 1) if src_right else (s % 2 == 0)
                rows.append(self.tok.encode("fixed RIGHT" if ok else "fixed WRONG") + [self.tok.eos_id])
        return padded_samples(rows, len(prompts), num_samples)


def make_rollouts(tok, rewards=REWARDS):
    q, g = rewards.shape
    return scripted_rollouts(tok, rewards, [f"attempt {i} says " + ("RIGHT" if rewards.reshape(-1)[i] else "WRONG")
                                            for i in range(q * g)])


def build(tok, method, rewards=REWARDS, seed=0):
    ro, sampler = make_rollouts(tok, rewards), ScriptedSampler(tok)
    ctx = Context(tok, sampler, reward, np.random.default_rng(seed), tok.pad_id)
    batch, metrics = method.build(ro, ctx)
    return ro, sampler, batch, metrics


def test_correction_prompts_per_call_reaches_the_sampler_and_changes_nothing_else(tokenizer):
    """correction_prompts_per_call caps the replay prompts sampled together (`sample(prompts_per_call=...)`, which
    returns one call's samples); 0 passes no keyword, so any sampler works as before."""
    class Recording(ScriptedSampler):
        def __call__(self, prompts, num_samples=1, max_new_tokens=64, **kw):
            self.kw = kw
            return super().__call__(prompts, num_samples, max_new_tokens)

    out = {}
    for per_call in (0, 2):
        ro, sampler = make_rollouts(tokenizer), Recording(tokenizer)
        ctx = Context(tokenizer, sampler, reward, np.random.default_rng(0), tokenizer.pad_id)
        out[per_call] = CIPO(correction_samples=2, correction_prompts_per_call=per_call).build(ro, ctx)[0]
        assert sampler.kw == ({"prompts_per_call": 2} if per_call else {})
    for a, b in zip(out[0], out[2]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="correction_prompts_per_call must be >= 0"):
        CIPO(correction_prompts_per_call=-1)


# ------------------------------------------------------------------------------------------ pure pieces


def test_template_takes_the_answer_format_and_matches_the_math_template():
    assert replay_correction_prompt("Q?", "my try") == correction_prompt("Q?", "my try")
    code = replay_correction_prompt("Write f.", "def f(): return 1", CODE_INSTRUCTION)
    assert code.endswith(CODE_INSTRUCTION) and SOLVE_INSTRUCTION not in code and "def f(): return 1" in code
    with pytest.raises(ValueError, match="answer_instruction"):
        replay_correction_prompt("Q?", "a", "")


def test_ratio_rule_moves_up_when_retention_drops_down_when_high_and_stays_in_bounds():
    s = RatioState(0.5)
    up = update_ratio(s, 2, 10, **RULE)  # retention 0.2 < tau_low
    assert up.rho == pytest.approx(0.6)
    down = update_ratio(s, 10, 10, **RULE)  # retention 1.0 > tau_high
    assert down.rho == pytest.approx(0.4)
    mid = update_ratio(s, 8, 10, **RULE)  # 0.8: between the thresholds, no earlier window
    assert mid.rho == 0.5
    # a drop of more than delta from the window mean, while the pooled retention is still above tau_low
    w = RatioState(0.5, (10, 10, 10), (10, 10, 10))
    drop = update_ratio(w, 7, 10, **RULE)  # this step 0.7 < 1.0 - 0.1; pooled (37/40) > tau_high
    assert drop.rho == pytest.approx(0.6)
    assert update_ratio(s, 0, 0, **RULE) == s  # no successful source: nothing to measure
    # bounds: forty bad steps, then forty perfect ones
    for _ in range(40):
        s = update_ratio(s, 0, 10, **RULE)
        assert RULE["rho_min"] <= s.rho <= RULE["rho_max"]
    assert s.rho == pytest.approx(RULE["rho_max"]) and len(s.hits) == RULE["window"]
    for _ in range(40):
        s = update_ratio(s, 10, 10, **RULE)
        assert RULE["rho_min"] <= s.rho <= RULE["rho_max"]
    assert s.rho == pytest.approx(RULE["rho_min"])


def test_window_drop_test_does_not_ratchet_rho_under_noise_but_still_reacts_to_a_sustained_drop():
    """drop_test="step" (docs/methods/cipo.md#spec-adaptive-replay-ratio as written) compares one step's retention,
    measured on 16 corrections, with the window mean: under stationary noise it sees a drop every few steps, nothing
    moves rho down (tau_high is out of reach) and rho climbs to rho_max. "window" compares the windowed retention with
    the previous window's, both ways: under the same noise rho wanders around its start; it still moves up when
    retention falls for good."""
    knobs = dict(RULE, rho_step=0.05, window=8)  # the method's defaults
    final = {"step": [], "window": []}
    for seed in range(20):
        hits = np.random.default_rng(seed).binomial(16, 0.75, size=100)  # retention 0.75 in [tau_low, tau_high]
        for test in final:
            s = RatioState(0.5)
            for h in hits:
                s = update_ratio(s, int(h), 16, **knobs, drop_test=test)
            final[test].append(s.rho)
            assert len(s.hits) == 8 * (1 if test == "step" else 2)
    assert np.allclose(final["step"], RULE["rho_max"])
    assert abs(np.median(final["window"]) - 0.5) <= 0.1 and min(final["window"]) < 0.5 < max(final["window"])
    s = RatioState(0.5, (15,) * 16, (16,) * 16)  # two windows at 0.94 ...
    for _ in range(6):  # ... then retention falls to 0.75 and stays there
        s = update_ratio(s, 12, 16, **RULE, drop_test="window")
    assert s.rho > 0.5
    with pytest.raises(ValueError, match="drop_test='last' is unknown"):
        update_ratio(s, 1, 2, **RULE, drop_test="last")


def test_shaping_gives_exactly_minus_alpha_minus_one_to_regressions_only():
    r = np.array([[1, 0, 1, 0], [1, 0, 0, 1], [0.7, 0.2, 0, 1]], np.float32)
    src = np.array([True, False, True])
    out = shape_correction_rewards(r, src, alpha=3.0)
    regression = src[:, None] & (r <= 0.5)
    np.testing.assert_array_equal(out[regression], np.full(regression.sum(), -2.0, np.float32))
    np.testing.assert_array_equal(out[~regression], r[~regression])
    with pytest.raises(ValueError, match="alpha"):
        shape_correction_rewards(r, src, alpha=1.0)


def test_shaping_reaches_the_advantages_only_without_a_per_group_std():
    """A right-source group's rewards {0, 1} become {-(alpha - 1), 1}: an affine map that a per-group std undoes
    (grpo: no change at all), while the default batch std makes such groups weigh more as alpha grows."""
    r = np.array([[1, 0, 1, 0], [1, 0, 0, 0]], np.float32)
    src = np.array([True, False])

    def adv(alpha, est):
        return CIPO(alpha=alpha, correction_estimator=est).correction_advantages(
            shape_correction_rewards(r, src, alpha))

    np.testing.assert_allclose(adv(2.0, "grpo"), adv(4.0, "grpo"), rtol=1e-6)
    ratio = lambda a: np.abs(a[0]).max() / np.abs(a[1]).max()  # right-source group against failed-source group
    assert ratio(adv(4.0, "grpo_batch_std")) > ratio(adv(2.0, "grpo_batch_std")) > ratio(adv(1.0001, "grpo_batch_std"))
    assert CIPO().correction_estimator == "grpo_batch_std"


def test_preference_orders_mixed_failures_by_weight_before_zero_pass():
    rewards = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], np.float32)
    acc = (rewards > 0.5).mean(1)
    for seed in range(5):
        order = rank_failed_sources(rewards, np.random.default_rng(seed))
        assert sorted(order) == sorted(np.flatnonzero(rewards.reshape(-1) == 0))
        a = acc[order // 4]
        # acc 0.5 (weight 0.25: its 2 failures) -> 0.25 and 0.75 (0.1875, tied: 3 + 1) -> the 4 zero-pass last
        assert list(a[:2]) == [0.5, 0.5] and sorted(a[2:6]) == [0.25] * 3 + [0.75] and list(a[6:]) == [0.0] * 4
    uniform = {tuple(rank_failed_sources(rewards, np.random.default_rng(s), preference="uniform")) for s in range(5)}
    assert len(uniform) > 1
    src = select_sources(rewards, 4, 0.25, np.random.default_rng(0))
    assert (rewards.reshape(-1)[src[:1]] > 0.5).all() and len(src) == 4  # round(0.25 * 4) = 1 success first
    assert list(acc[src[1:3] // 4]) == [0.5, 0.5] and acc[src[3] // 4] in (0.25, 0.75)


# ------------------------------------------------------------------------------------------ the build


def test_replay_prompts_carry_the_source_attempt_verbatim_and_streams_are_logged(tokenizer):
    method = CIPO(correction_samples=4, rho_init=0.5, alpha=2.0, **{k: v for k, v in RULE.items()
                                                                    if k != "rho_step"})
    ro, sampler, batch, m = build(tokenizer, method)
    assert len(sampler.prompts) == 4  # replay_prompts = Q
    texts = set(ro.texts)
    for p in sampler.prompts:
        attempt = p.split("earlier attempt at this problem:\n", 1)[1].split("\n\nReview", 1)[0]
        assert attempt in texts, attempt
    task = np.asarray(batch.task_id)
    assert (task == TASKS["solve"]).sum() == 16 and (task == TASKS["correct"]).sum() == 16
    # 2 of 4 sources right; the scripted corrections fix half of the failed ones and break half of the right ones
    assert m["correct/success_source_frac"] == 0.5
    assert m["correct/fix_rate"] == 0.5 and m["correct/break_rate"] == 0.5 and m["correct/accuracy"] == 0.5
    assert m["cipo/rho"] == 0.5 and m["cipo/rho_next"] == pytest.approx(0.55)  # retention 0.5 < tau_low
    assert "solve/reward_mean" in m and method.state_dict()["counts"] == [8]
    # what the correction stream generated, for token budgets (experiment.compare.token_curve): 16 scripted completions
    scripted = [len(tokenizer.encode(t)) + 1 for t in ("fixed RIGHT", "fixed WRONG")]
    assert m["generate/extra_tokens"] == 8 * sum(scripted)
    # every correction row carries its group's advantage: regressions and misses below 0, keeps and fixes above
    corr = np.flatnonzero(task == TASKS["correct"])
    a = np.asarray(batch.advantages)[corr][np.asarray(batch.loss_mask)[corr] > 0]
    assert (a > 0).any() and (a < 0).any()


def test_bad_knobs_name_the_field():
    for kw, field in [({"alpha": 1.0}, "alpha"), ({"rho_init": 0.95}, "rho_init"), ({"preference": "x"},
                                                                                    "preference"),
                      ({"correction_samples": 1}, "correction_samples"),
                      ({"correction_estimator": "nope"}, "correction_estimator")]:
        with pytest.raises(ValueError, match=field):
            CIPO(**kw)
    with pytest.raises(ValueError, match="bogus"):
        make_method({"name": "cipo", "extra": {"bogus": 1}})


def test_updates_on_a_correction_group_raise_the_right_correction(tokenizer, model):
    prompt = tokenizer.encode(tokenizer.render_prompt(replay_correction_prompt("What is 3 + 4?", "3 + 4 = 8")))
    right, wrong = tokenizer.encode("3 + 4 = 7") + [tokenizer.eos_id], tokenizer.encode("3 + 4 = 9") + [
        tokenizer.eos_id]
    method = CIPO()
    graphdef, params = nnx.split(model)
    comps = [right, wrong, wrong, right]
    old = completion_logprobs(model, params, [prompt] * 4, comps)
    adv = np.asarray(shape_correction_rewards(np.array([[1, 0, 0, 1]], np.float32), np.array([False]), 2.0))
    adv = (adv - adv.mean()) / (adv.std() + 1e-6)
    batch = build_token_batch([prompt] * 4, comps, list(adv[0]), old, "correct", pad_id=tokenizer.pad_id)
    opt = optax.adam(3e-3)
    update = make_update(graphdef, opt, method.terms())
    logp = lambda p: float(completion_logprobs(model, p, [prompt], [right])[0].sum())
    before, p, s = logp(params), jax.tree.map(jnp.copy, params), opt.init(params)
    for _ in range(3):
        out = update(p, s, batch)
        p, s = out.params, out.opt_state
    assert logp(p) > before + 0.05, (before, logp(p))


# ------------------------------------------------------------------------------------------ trainer


def make_trainer(tokenizer, workdir, steps=4):
    model = tiny_model(tokenizer, seed=3, max_positions=1024)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=steps, prompts_per_step=2, samples_per_prompt=4, max_new_tokens=8, lr=1e-3,
                        checkpoint_every=1, progress=False, seed=11)
    # rho_step large and tau_high low so that rho moves every step on a random model
    method = CIPOV(correction_samples=2, rho_step=0.2, tau_low=0.5, tau_high=0.5, measure_verifier=False)
    return Trainer(model, tokenizer, method, train, parity_reward, cfg, workdir)


@pytest.mark.slow  # ~70 s on 2 shared cores: three trainers (full, killed, resumed)
def test_trainer_logs_both_streams_and_rho_and_resumes_rho_bit_exactly(tokenizer, tmp_path):
    full = make_trainer(tokenizer, str(tmp_path / "a"))
    ref = full.run()
    ref_state = full.method.state_dict()
    full.close()
    for k in ("loss/pg", "loss/correct", "loss/verify", "solve/reward_mean", "correct/accuracy", "cipo/rho"):
        assert all(k in r for r in ref), k
    assert len({r["cipo/rho"] for r in ref}) > 1  # rho moved
    part = make_trainer(tokenizer, str(tmp_path / "b"))
    first = part.run(stop_after=2)
    part.close()
    resumed = make_trainer(tokenizer, str(tmp_path / "b"))
    assert resumed.method.state_dict() == part.method.state_dict()
    rest = resumed.run()
    resumed.close()
    assert [r["cipo/rho"] for r in ref] == [r["cipo/rho"] for r in first + rest]
    assert [r["loss/correct"] for r in ref] == [r["loss/correct"] for r in first + rest]
    assert resumed.method.state_dict() == ref_state


# ------------------------------------------------------------------------------------------ configs


CONFIGS = PRESET_DIR


@pytest.mark.parametrize("name", ["cipo.py", "cipo_code.py", "cipo_v.py", "cipo_qwen3_4b_math.py",
                                  "cipo_seed_coder_8b.py"])
def test_configs_validate_and_build_the_method(name):
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config

    cfg = load_config_file(os.path.join(CONFIGS, name))
    read_run_config(cfg)
    m = make_method({**cfg.method.to_dict(), "max_len": cfg.rl.max_new_tokens})
    assert isinstance(m, CIPO) and m.alpha > 1
    if "code" in name or "coder" in name:
        assert m.answer_instruction == CODE_INSTRUCTION


# ------------------------------------------------------------------------------------------ test time


def test_self_correct_reports_fixes_breaks_and_tokens_per_round(tokenizer):
    from jaxrl_reason.inference.correction import self_correct

    ex = arithmetic_examples(4, seed=5, config=ARITH)
    attempts = ["a RIGHT", "a WRONG", "a WRONG", "a RIGHT"]

    def generate(prompts, *, max_new_tokens):
        # fixes every wrong attempt it is shown, breaks the right attempt of example 0 only
        out = []
        for i, p in enumerate(prompts):
            text = tokenizer.decode(p)
            ok = "WRONG" in text or i != 0
            out.append(tokenizer.encode("fixed RIGHT" if ok else "fixed WRONG")[:max_new_tokens])
        return out

    res = self_correct(generate, tokenizer, ex, attempts, reward, rounds=2, max_new_tokens=16)
    s = res.summary()
    assert s["correct/round0/accuracy"] == 0.5
    assert s["correct/round1/fix_rate"] == 1.0 and s["correct/round1/break_rate"] == 0.5
    assert s["correct/round1/accuracy"] == 0.75
    # round 2: the broken example 0 is fixed back, nothing else is broken
    assert s["correct/round2/fix_rate"] == 1.0 and s["correct/round2/break_rate"] == 0.0
    assert s["correct/round2/accuracy"] == 1.0 and s["correct/round2/break_rate_vs_round0"] == 0.0
    assert s["correct/round2/tokens_per_example"] > s["correct/round1/tokens_per_example"] > 0
    rows = res.rows(round0_tokens=5.0)  # the table / curve form of the same numbers, round 0 priced at 5 tokens
    assert [(r["round"], r["acc"]) for r in rows] == [(0, 0.5), (1, 0.75), (2, 1.0)]
    assert np.isnan(rows[0]["fix_rate"]) and rows[1]["fix_rate"] == 1.0 and rows[1]["break_rate"] == 0.5
    assert rows[2]["tokens"] == 5.0 + s["correct/round2/tokens_per_example"]


def test_buggy_programs_are_fixed_in_the_sandbox(tokenizer):
    from jaxrl_reason.data.code_datasets import code_example_reward, generate_function_tasks, make_correction_problems
    from jaxrl_reason.inference.correction import correct_buggy_programs

    problems = make_correction_problems(generate_function_tasks(4, seed=0), seed=0)
    assert problems, "the AST mutations gave no failing program"
    refs = {p.question: p.reference for p in problems}

    def generate(prompts, *, max_new_tokens):  # an oracle that returns the reference for the first problem only
        out = []
        for i, p in enumerate(prompts):
            q = next(q for q in refs if q.strip()[:40] in tokenizer.decode(p)) if i == 0 else None
            body = refs[q] if q else "def f():\n    return None"
            out.append(tokenizer.encode(f"```python\n{body}\n```"))
        return out

    res = correct_buggy_programs(generate, tokenizer, problems, code_example_reward, rounds=1)
    assert res.correct[0].sum() == 0 and res.correct[1].tolist() == [True] + [False] * (len(problems) - 1)


@pytest.mark.slow  # 31-43 s a call on 2 shared cores (2026-12-07)
@pytest.mark.parametrize("name", ["cipo_qwen3_4b_math.py", "cipo_seed_coder_8b.py"])
def test_accelerator_configs_run_one_step_on_a_tiny_stand_in(name, tokenizer, tmp_path):
    """The accelerator presets' method and RL sections, as read_run_config reads them, drive one Trainer step; only
    the model (tiny, random), the data (arithmetic) and the sizes are swapped for the stand-in."""
    import dataclasses

    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.config import read_run_config

    run = read_run_config(load_config_file(os.path.join(CONFIGS, name)))
    rl = dataclasses.replace(run.rl, steps=1, prompts_per_step=2, samples_per_prompt=2, max_new_tokens=8,
                             micro_batches=1, checkpoint_every=0, eval_every=0, progress=False)
    method = make_method(dataclasses.replace(run.method, extra={**run.method.extra, "correction_samples": 2}))
    train = arithmetic_examples(8, seed=7, config=ARITH)
    tr = Trainer(tiny_model(tokenizer, seed=3, max_positions=1024), tokenizer, method, train, parity_reward, rl,
                 str(tmp_path / "run"))
    rows = tr.run()
    tr.close()
    assert len(rows) == 1 and "loss/correct" in rows[0] and "cipo/rho" in rows[0]


def test_evaluate_correction_runs_a_model_end_to_end(tokenizer, model):
    from jaxrl_reason.inference.correction import evaluate_correction

    ex = arithmetic_examples(3, seed=9, config=ARITH)
    s = evaluate_correction(model, tokenizer, ex, rounds=2, max_new_tokens=6, batch_size=4)
    assert {"correct/round0/accuracy", "correct/round2/fix_rate", "correct/round2/tokens_per_example"} <= set(s)
    assert 0 < s["correct/round0/tokens_per_example"] <= 6
    assert 0 < s["correct/round1/tokens_per_example"] <= s["correct/round2/tokens_per_example"] <= 12
    # per example and round: the summary's accuracies are its column means
    assert np.shape(s["correct"]) == (3, 3)
    for t in range(3):
        assert np.mean(s["correct"][t]) == pytest.approx(s[f"correct/round{t}/accuracy"])


def test_a_worked_check_reply_hands_its_solution_to_the_next_round(tokenizer):
    """A "worked_check" correction opens with its check of the attempt (8 lines on a 4x4 Latin square); round 2
    reviews the solution after that check, as training's corrections review solutions -- never a check."""
    from jaxrl_reason.data.latin_square import latin_square_examples
    from jaxrl_reason.data.testbed import correction_solution, correction_target, task_of
    from jaxrl_reason.data.testbed import reward as task_reward
    from jaxrl_reason.inference.correction import self_correct

    task = task_of("latin_square")
    ex = latin_square_examples(2, seed=3)
    wrong = ex[1].solution  # the other question's grid: wrong here
    replies = [correction_target(task, e.question, task.parse(wrong), e.solution, "worked_check") for e in ex]
    assert replies[0].count("\n") == 8 and replies[0].startswith("Row 1:")
    assert correction_solution(task, ex[0].question, wrong, replies[0]) == ex[0].solution
    assert correction_solution(task, ex[0].question, wrong, "Row 1: ok") == "Row 1: ok"  # no solution after it
    seen = []

    def generate(prompts, *, max_new_tokens):
        seen.append([tokenizer.decode(p) for p in prompts])
        return [tokenizer.encode(r) for r in replies]

    res = self_correct(generate, tokenizer, ex, [wrong, wrong], lambda t, e: task_reward(task, t, e), rounds=2,
                       max_new_tokens=300, correction_format="worked_check")
    assert res.correct[:, 0].tolist() == [False, True, True] and res.texts[0] == replies[0]
    assert "Row 1:" not in seen[1][0] and ex[0].solution.strip() in seen[1][0]
    # elsewhere (no fixed check layout) the next round reviews the whole reply
    ar = arithmetic_examples(1, seed=5, config=ARITH)
    seen.clear()
    replies = ["check: fine\nRIGHT"]
    self_correct(generate, tokenizer, ar, ["a WRONG"], reward, rounds=2, max_new_tokens=16,
                 correction_format="worked_check")
    assert "check: fine" in seen[1][0]


def test_worked_check_corrections_ask_for_the_check_first(tokenizer):
    """data.correction_format='worked_check': the replay prompt (training) and the test-time correction prompt ask
    for a line-by-line check of the attempt before the corrected solution; the attempt is still verbatim."""
    from jaxrl_reason.inference.correction import self_correct

    ask = "First check the attempt, one line per constraint"
    assert ask in replay_correction_prompt("Q?", "a", correction_format="worked_check")
    assert ask not in replay_correction_prompt("Q?", "a")
    with pytest.raises(ValueError, match="correction_format='checked' is unknown"):
        replay_correction_prompt("Q?", "a", correction_format="checked")
    method = CIPO(correction_samples=4, rho_init=0.5, alpha=2.0, **{k: v for k, v in RULE.items()
                                                                    if k != "rho_step"})
    ro, sampler = make_rollouts(tokenizer), ScriptedSampler(tokenizer)
    ctx = Context(tokenizer, sampler, reward, np.random.default_rng(0), tokenizer.pad_id,
                  formats=RowFormats(correction_format="worked_check"))
    method.build(ro, ctx)
    assert len(sampler.prompts) == 4 and all(ask in p for p in sampler.prompts)
    for p in sampler.prompts:
        assert p.split("earlier attempt at this problem:\n", 1)[1].split("\n\nReview", 1)[0] in set(ro.texts)
    seen = []

    def generate(prompts, *, max_new_tokens):
        seen.extend(tokenizer.decode(p) for p in prompts)
        return [tokenizer.encode("fixed RIGHT")[:max_new_tokens] for _ in prompts]

    ex = arithmetic_examples(2, seed=5, config=ARITH)
    res = self_correct(generate, tokenizer, ex, ["a WRONG", "a RIGHT"], reward, rounds=1, max_new_tokens=16,
                       correction_format="worked_check")
    assert len(seen) == 2 and all(ask in t for t in seen) and res.summary()["correct/round1/fix_rate"] == 1.0
