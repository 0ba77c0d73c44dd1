"""CURE (docs/methods/cure.md#spec): critique selection, teacher-forced verdicts, guided re-exploration, replay, hybrid
critique advantages, pi_old recomputation, and test-time self-refinement.

The method is driven by a scripted sampler (critiques, hints and guided solutions whose correctness the test
chooses) and a tiny real model for the log-prob recomputation and the update."""
import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_reason.configs import PRESET_DIR
from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import critique_prompt, guided_prompt, solve_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.inference.refine import (NOT_CRITIQUED, VERDICT_ERROR, VERDICT_NO_ERROR, self_refine,
                                           verdict_scores)
from jaxrl_reason.methods import make_method
from jaxrl_reason.methods.base import Context, RowFormats
from jaxrl_reason.methods.cure import (CURE, CURE_TASKS, PAPER_LOSS, critique_pools, critique_rest_advantage,
                                       replay_group_advantages, replay_members, select_critique_rows)
from jaxrl_reason.methods.grpo import PolicyLossConfig
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rl.batch import PAD_TASK_ID, TASKS
from jaxrl_reason.rl.losses import objective
from jaxrl_reason.rl.scoring import completion_logprobs
from jaxrl_reason.train.update import make_update

from tiny import ARITH, padded_samples, right_reward as reward, scripted_rollouts, tiny_model  # noqa: E402

HINT = "add the numbers one pair at a time and check every partial sum twice before writing it"
M = 4
C = 3.0  # critique_advantage_scale; not 2, so the rest's advantage differs from the verdict's +1
# Solve rewards, Q=4 x K=4: zero-pass, partial (0.25), partial (0.75), solved (outside the [0, 0.9] range).
REWARDS = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
# The hard regime CURE targets: one zero-pass and one fully solved query, no mixed group at all.
HARD = np.array([[0, 0, 0, 0], [1, 1, 1, 1]], np.float32)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    ex = arithmetic_examples(30, seed=1, config=ARITH)
    extra = [critique_prompt(e.question, e.solution) for e in ex] + [guided_prompt(e.question, HINT) for e in ex]
    extra += [f"ERROR_FOUND: true\nERROR_QUOTE: x\nWHY_IT_MATTERS: y\nHIGH_LEVEL_HINT: {HINT}"] * 5
    # A vocabulary that knows the templates keeps critique rows short, hence the tests fast.
    texts = [solve_prompt(e.question) for e in ex] + [e.solution for e in ex] + extra
    return train_tiny_tokenizer(texts, str(tmp_path_factory.mktemp("tok")), vocab_size=640)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer, seed=3, max_positions=1024)


def solve_text(q, s, rewards=REWARDS):
    return f"attempt q{q}s{s} " + ("RIGHT" if rewards[q, s] else "WRONG")


class ScriptedSampler:
    """Stands in for ctx.sample: answers critique prompts with a four-field critique (a short hint when the
    critiqued attempt is q0s0), guided prompts with M solutions of which the even-numbered are right."""

    def __init__(self, tok):
        self.tok, self.calls = tok, []

    def respond(self, prompt_text, s):
        if "Find the earliest error" in prompt_text:
            hint = "add carefully" if "attempt q0s0" in prompt_text else HINT
            return f"ERROR_QUOTE: 3 + 4 = 8\nWHY_IT_MATTERS: the sum is off\nHIGH_LEVEL_HINT: {hint}"
        if "Guidance for solving" in prompt_text:
            return "fresh RIGHT sum" if s % 2 == 0 else "fresh WRONG sum"
        raise AssertionError(f"unexpected prompt: {prompt_text[:80]!r}")

    def __call__(self, prompts, num_samples=1, max_new_tokens=64, **kw):
        self.calls.append({"prompts": [list(p) for p in prompts], "num_samples": num_samples,
                           "max_new_tokens": max_new_tokens})
        rows = [self.tok.encode(self.respond(self.tok.decode(p), s))[:max_new_tokens - 1] + [self.tok.eos_id]
                for p in prompts for s in range(num_samples)]
        return padded_samples(rows, len(prompts), num_samples, lambda n: -0.25 - 0.01 * np.arange(n))


def make_rollouts(tok, rewards=REWARDS):
    q, k = rewards.shape
    return scripted_rollouts(tok, rewards, [solve_text(i // k, i % k, rewards) for i in range(q * k)])


def build_once(tokenizer, model, rewards, formats: RowFormats = RowFormats(), **knobs):
    method = CURE("grpo", guided_samples=M, critique_advantage_scale=C, critique_max_new_tokens=64, **knobs)
    ro = make_rollouts(tokenizer, rewards)
    sampler = ScriptedSampler(tokenizer)
    ctx = Context(tokenizer, sampler, reward, np.random.default_rng(0), tokenizer.pad_id, model, nnx.state(model),
                  formats=formats)
    batch, metrics = method.build(ro, ctx)
    return method, ro, sampler, batch, metrics


@pytest.fixture(scope="module")
def built(tokenizer, model):
    """One CURE build on the scripted step (default critique batch: 16 / 2 = 8): (method, rollouts, sampler,
    batch, metrics)."""
    return build_once(tokenizer, model, REWARDS)


@pytest.fixture(scope="module")
def hard_built(tokenizer, model):
    """A build on the hard regime, a critique batch of 8: q0's four wrong samples and four of q1's right ones."""
    return build_once(tokenizer, model, HARD, critique_batch_size=8)


def rows_of(batch, task):
    return np.flatnonzero(np.asarray(batch.task_id) == TASKS[task])


def completion(batch, i):
    m = np.asarray(batch.loss_mask[i]) > 0
    return np.asarray(batch.tokens[i])[m].tolist(), np.flatnonzero(m)


# ------------------------------------------------------------------------------------------ pure pieces


def test_replay_group_advantages_by_hand():
    # q0: four wrong plain samples + two replayed successes; q1: no replay. GRPO, sample std (ddof=1):
    # mean 1/3, std = sqrt((4 * 1/9 + 2 * 4/9) / 5) = sqrt(12/45).
    out = replay_group_advantages(np.array([[0, 0, 0, 0], [1, 0, 1, 0]], np.float32), [[1.0, 1.0], []], "grpo")
    std = np.sqrt(12 / 45)
    np.testing.assert_allclose(out.base[0], [-(1 / 3) / std] * 4, rtol=1e-4)
    np.testing.assert_allclose(out.replay[0], [(2 / 3) / std] * 2, rtol=1e-4)
    # the group without replay is plain GRPO: mean 1/2, std sqrt(4 * 1/4 / 3)
    np.testing.assert_allclose(out.base[1], np.array([1, -1, 1, -1]) * 0.5 / np.sqrt(1 / 3), rtol=1e-4)
    assert out.replay[1].shape == (0,)
    # without replay the zero-pass group carries no signal at all
    assert np.all(replay_group_advantages(np.zeros((1, 4)), [[]], "grpo").base == 0)
    # rloo on the enlarged group: r_i - mean of the other five
    out = replay_group_advantages(np.zeros((1, 4), np.float32), [[1.0, 1.0]], "rloo")
    np.testing.assert_allclose(out.base[0], [0 - 2 / 5] * 4, rtol=1e-5)
    np.testing.assert_allclose(out.replay[0], [1 - 1 / 5] * 2, rtol=1e-5)


def test_critique_rest_advantage_by_hand():
    assert critique_rest_advantage([1, 0, 1, 1], 0.25, scale=2.0, format_penalty=0.0) == pytest.approx(1.0)
    # the penalty is part of the critique's reward, inside the scale: 2 * (g + pen - acc), as the authors' code
    assert critique_rest_advantage([1, 0, 1, 1], 0.25, scale=2.0, format_penalty=-0.25) == pytest.approx(0.5)
    assert critique_rest_advantage([0, 0, 0, 0], 0.5, scale=2.0, format_penalty=-0.75) == pytest.approx(-2.5)
    assert critique_rest_advantage(None, 0.5, scale=2.0, format_penalty=-0.5) == -0.5  # a correct sample's
    assert critique_rest_advantage(None, 0.5, scale=2.0, format_penalty=0.0) == 0.0
    with pytest.raises(ValueError, match="guided"):
        critique_rest_advantage([], 0.0, scale=2.0, format_penalty=0.0)


def _split(rewards, idx):
    """(wrong rows, correct rows, queries) of a selection."""
    correct = np.asarray(rewards).reshape(-1)[idx] > 0.5
    return idx[~correct], idx[correct], idx // np.asarray(rewards).shape[1]


def test_critique_pools_by_hand():
    p = critique_pools(REWARDS, (0.0, 0.9))
    assert p.pairs.tolist() == [[5, 4], [11, 8]]  # (first wrong, first correct) of q1 and of q2
    assert p.zero_heads.tolist() == [0] and p.zero_rest.tolist() == [1, 2, 3]
    assert p.mixed_wrong.tolist() == [6, 7] and p.mixed_correct.tolist() == [9, 10]
    assert p.solved.tolist() == [12, 13, 14, 15]  # solved queries are a pool of their own, whatever the interval
    # the interval selects mixed queries only: q2 (0.75) leaves; zero-pass and solved pools stay
    p = critique_pools(REWARDS, (0.0, 0.5))
    assert p.pairs.tolist() == [[5, 4]] and p.zero_heads.tolist() == [0] and len(p.solved) == 4


def test_select_fills_a_fixed_batch_half_wrong_half_right_in_the_authors_order():
    rng = np.random.default_rng(0)
    for seed in range(4):
        idx = select_critique_rows(REWARDS, (0.0, 0.9), 8, np.random.default_rng(seed))
        wrong, right, _ = _split(REWARDS, idx)
        assert len(idx) == 8 and len(wrong) == len(right) == 4
        # the pairs, the zero-pass head, one of q1's other wrong samples (the floor keeps room for q0: 1 of 8)
        assert {5, 11, 0} <= set(wrong.tolist()) and len(set(wrong.tolist()) & {6, 7}) == 1
        assert sorted(right.tolist()) == [4, 8, 9, 10]  # mixed correct samples suffice: no solved one
    idx = select_critique_rows(REWARDS, (0.0, 0.9), 12, rng)
    wrong, right, q = _split(REWARDS, idx)
    assert len(wrong) == len(right) == 6
    assert {0, 5, 11, 6, 7} <= set(wrong.tolist()) and np.sum(q[np.isin(idx, wrong)] == 0) == 2  # + one more q0
    assert {4, 8, 9, 10} <= set(right.tolist()) and np.sum(q == 3) == 2  # mixed ones ran short: solved fill


def test_hard_batch_still_yields_critiques():
    # zero-pass + fully solved only: the earlier 1:1 balance inside [0, 0.9] gave no critique at all
    for seed in range(4):
        idx = select_critique_rows(HARD, (0.0, 0.9), 4, np.random.default_rng(seed))
        wrong, right, _ = _split(HARD, idx)
        assert len(wrong) == len(right) == 2 and 0 in wrong and np.all(right >= 4)


def test_short_pools_repeat_samples_and_the_zero_pass_floor():
    rng = np.random.default_rng(0)
    idx = select_critique_rows(np.array([[0, 0], [1, 1]]), (0.0, 0.9), 8, rng)
    # every sample of a pool, then random repeats: the batch keeps its size
    assert idx[:4].tolist() == [0, 1, 1, 1] and sorted(set(idx[4:].tolist())) == [2, 3] and len(idx) == 8
    # no correct sample anywhere: the wrong half only (the right half cannot be filled)
    idx = select_critique_rows(np.zeros((2, 4)), (0.0, 0.9), 8, rng)
    assert len(idx) == 4 and {0, 4} <= set(idx.tolist())
    # no zero-pass query: the slots kept for zero-pass samples go to mixed wrong ones (our top-up)
    idx = select_critique_rows(np.array([[1, 0, 0, 0], [1, 0, 0, 0]]), (0.0, 0.9), 8, rng)
    wrong, right, _ = _split(np.array([[1, 0, 0, 0], [1, 0, 0, 0]]), idx)
    assert len(wrong) == len(right) == 4 and len(set(wrong.tolist())) == 4 and sorted(set(right.tolist())) == [0, 4]
    # the floor: mixed wrong samples leave room for zero-pass ones (2 of 16 by default; at 0.5, every wrong slot
    # left after the pairs)
    rewards = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]])
    for floor, zero_rows in ((0.125, 2), (0.5, 5)):
        idx = select_critique_rows(rewards, (0.0, 0.9), 16, rng, zero_pass_floor=floor)
        wrong, right, _ = _split(rewards, idx)
        assert len(wrong) == len(right) == 8 and np.sum(idx // 4 == 0) == zero_rows  # 3 pair wrongs + 5
    assert len(select_critique_rows(REWARDS, (0.0, 0.9), 0, rng)) == 0
    with pytest.raises(ValueError, match="critique_zero_pass_floor"):
        select_critique_rows(REWARDS, (0.0, 0.9), 8, rng, zero_pass_floor=2.0)


def test_replay_is_capped_at_the_group_size():
    # four critiques of a zero-pass group of 4, every guided solution right: 16 successes
    ok = np.ones((4, M), bool)
    uncapped = replay_members([0, 0, 0, 0], ok, np.array([True]), None)
    capped = replay_members([0, 0, 0, 0], ok, np.array([True]), 4)
    assert len(uncapped[0]) == 16 and capped[0] == [(0, 0), (0, 1), (0, 2), (0, 3)]  # in critique order
    assert replay_members([0], ok[:1], np.array([False]), 4) == [[]]  # outside the replay range
    # the old wrong answers: -0.94 with the cap, -1.95 without; each replay +0.94 instead of +0.49
    a = replay_group_advantages(np.zeros((1, 4)), [[1.0] * 4], "grpo")
    np.testing.assert_allclose([a.base[0, 0], a.replay[0][0]], [-0.935, 0.935], atol=1e-3)
    a = replay_group_advantages(np.zeros((1, 4)), [[1.0] * 16], "grpo")
    np.testing.assert_allclose([a.base[0, 0], a.replay[0][0]], [-1.949, 0.487], atol=1e-3)


def test_terms_kl_is_aggregated_as_each_policy_term():
    loss = PolicyLossConfig(aggregation="seq_mean_token_sum_norm", max_len=32, beta=0.1)
    terms = {t.name: t for t in CURE(loss=loss, critique_weight=0.5).terms()}
    assert list(terms) == ["pg", "critique", "guided_solve", "kl", "critique_kl", "guided_solve_kl"]
    for pg, kl in (("pg", "kl"), ("critique", "critique_kl"), ("guided_solve", "guided_solve_kl")):
        assert terms[kl].kind == "kl" and terms[kl].tasks == terms[pg].tasks
        assert (terms[kl].aggregation, terms[kl].max_len) == (terms[pg].aggregation, terms[pg].max_len)
    assert terms["critique_kl"].weight == pytest.approx(0.05)  # beta x the task's weight
    pooled = CURE(loss=loss, task_pooling="pooled").terms()
    assert [(t.name, t.kind, t.tasks, t.aggregation) for t in pooled] == [
        ("pg", "ppo_clip", CURE_TASKS, "seq_mean_token_sum_norm"), ("kl", "kl", CURE_TASKS, "seq_mean_token_sum_norm")]
    with pytest.raises(ValueError, match="task_pooling='pooled'.*critique_weight"):
        CURE(task_pooling="pooled", critique_weight=0.5)
    with pytest.raises(ValueError, match="task_pooling"):
        CURE(task_pooling="mixed")


def test_pooled_loss_is_one_token_mean_over_all_tasks(built):
    _, _, _, batch, _ = built
    lp = jnp.asarray(batch.old_logprobs)  # ratio 1: each token's PPO-clip loss is -A
    adv, mask, task = np.asarray(batch.advantages), np.asarray(batch.loss_mask) > 0, np.asarray(batch.task_id)
    per_task, _ = objective(lp, batch, CURE().terms())
    pooled, _ = objective(lp, batch, CURE(task_pooling="pooled").terms())
    means = [-(adv[task == TASKS[t]] * mask[task == TASKS[t]]).sum() / mask[task == TASKS[t]].sum()
             for t in CURE_TASKS]
    np.testing.assert_allclose(float(per_task), sum(means), rtol=1e-5)  # the paper: per-task means, summed
    np.testing.assert_allclose(float(pooled), -(adv * mask).sum() / mask.sum(), rtol=1e-5)  # the authors' code
    assert abs(float(per_task) - float(pooled)) > 1e-3


def test_cure_keeps_zero_signal_groups_from_dynamic_sampling():
    assert CURE.uses_zero_signal_groups


def test_bad_knobs_name_the_field():
    with pytest.raises(ValueError, match="critique_acc_range"):
        CURE(critique_acc_range=(0.5, 0.1))
    with pytest.raises(ValueError, match="guided_samples"):
        CURE(guided_samples=0)
    with pytest.raises(ValueError, match="format_penalty"):
        CURE(format_penalty_missing=0.5)
    with pytest.raises(ValueError, match="max_replay_per_query"):
        CURE(max_replay_per_query=-2)
    with pytest.raises(ValueError, match="max_critiques was removed: use critique_batch_size"):
        CURE(max_critiques=16)
    with pytest.raises(ValueError, match="guided_layout was removed: set data.guided_layout"):
        CURE(guided_layout="first")


# ------------------------------------------------------------------------------------------ one build


def test_build_rows_and_metrics(built):
    method, ro, sampler, batch, metrics = built
    assert len(rows_of(batch, "critique")) == metrics["critique/rows"] == 8  # Q*K/2 by default
    assert len(rows_of(batch, "guided_solve")) == metrics["guided_solve/rows"] == 4 * M
    # one critique of q0 (the zero-pass head) with 2 of M=4 guided solutions right -> 2 replayed into q0
    assert metrics["replay/rows"] == 2 and metrics["replay/queries"] == 1
    assert metrics["critique/zero_pass_rows"] == 1 and metrics["critique/repeated_rows"] == 0
    assert len(rows_of(batch, "solve")) == 16 + 2
    assert metrics["critique/wrong_frac"] == 0.5 and metrics["guided_solve/accuracy"] == 0.5
    assert {t.name for t in method.terms()} == {"pg", "critique", "guided_solve"}
    # the critique budget reached the sampler; guided solutions used the trainer's default budget
    assert sampler.calls[0]["max_new_tokens"] == 64 and sampler.calls[1]["num_samples"] == M


def test_critique_prompts_end_with_the_forced_verdict(built, tokenizer):
    _, ro, sampler, batch, _ = built
    crit_prompts = [tokenizer.decode(p) for p in sampler.calls[0]["prompts"]]
    for text in crit_prompts:
        attempt = text.split("Solution:\n")[1].split("\n")[0]
        wrong = "WRONG" in attempt
        assert text.endswith("ERROR_FOUND: true\n" if wrong else "ERROR_FOUND: false\n"), text[-40:]
    # mixed queries had correct samples enough: the solved q3's attempts never appear
    assert not any("attempt q3" in t for t in crit_prompts)


def test_guided_prompt_never_contains_the_wrong_attempt(built, tokenizer):
    _, ro, sampler, _, _ = built
    guided = [tokenizer.decode(p) for p in sampler.calls[1]["prompts"]]
    assert len(guided) == 4
    for text in guided:
        assert "Guidance for solving" in text and "attempt q" not in text
        assert not any(t in text for t in ro.texts)


def test_guided_layout_first_puts_the_hint_before_the_plain_solve_prompt(tokenizer, model):
    """data.guided_layout='first' (RowFormats.guided_layout): the same guided solutions, posed as the guidance
    followed by the plain solve prompt of the query (prompts.guided_prompt)."""
    _, ro, sampler, _, metrics = build_once(tokenizer, model, REWARDS, RowFormats(guided_layout="first"))
    guided = [tokenizer.decode(p) for p in sampler.calls[1]["prompts"]]
    assert len(guided) == 4 and metrics["guided_solve/accuracy"] == 0.5
    questions = {e.question for e in ro.examples}
    for text in guided:
        user = text.split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
        assert user.startswith("Guidance for solving the problem below:\n")
        assert any(user.endswith(solve_prompt(q)) for q in questions), user[-80:]
        assert not any(t in text for t in ro.texts)


def test_verdict_tokens_and_rest_carry_the_hybrid_advantage(built, tokenizer):
    _, ro, _, batch, _ = built
    adv = np.asarray(batch.advantages)
    true_ids = tokenizer.encode("ERROR_FOUND: true\n")
    false_ids = tokenizer.encode("ERROR_FOUND: false\n")
    seen_short_hint = 0
    for i in rows_of(batch, "critique"):
        toks, pos = completion(batch, i)
        prompt_text = tokenizer.decode(np.asarray(batch.tokens[i])[:pos[0]].tolist())
        wrong = "WRONG" in prompt_text.split("Solution:\n")[1].split("\n")[0]
        verdict = true_ids if wrong else false_ids
        assert toks[:len(verdict)] == verdict
        a = adv[i, pos]
        np.testing.assert_allclose(a[:len(verdict)], 1.0)  # the fixed verdict advantage
        if wrong:
            # guided correctness 2 of 4, so C * (0.5 + pen - acc(x)); q0s0's critique has a short hint: pen -0.25
            # inside the scale (the authors' code), not added after it
            qi = int(prompt_text.split("attempt q")[1][0])
            short = "attempt q0s0" in prompt_text
            seen_short_hint += short
            acc = REWARDS[qi].mean()
            np.testing.assert_allclose(a[len(verdict):], C * (0.5 - (0.25 if short else 0.0) - acc), rtol=1e-6)
        else:
            np.testing.assert_allclose(a[len(verdict):], 0.0)  # well-formed critique of a correct sample
    assert seen_short_hint == 1


def stub_check(question, text):
    """A stand-in worked check: one line naming the attempt and its mark."""
    return f"Check {text.split()[1]}: {'repeat' if 'WRONG' in text else 'ok'}"


def test_worked_check_critique_forces_the_check_then_the_verdict(tokenizer, model):
    """Context.critique_check (data.critique_format='worked_check'): the critique prompt asks for the check first,
    and the forced start is the task's check of the attempt, then the verdict; both carry the verdict's fixed
    advantage, the generated rest the same hybrid advantage as without the check."""
    method = CURE("grpo", guided_samples=M, critique_advantage_scale=C, critique_max_new_tokens=64)
    ro = make_rollouts(tokenizer, REWARDS)
    sampler = ScriptedSampler(tokenizer)
    ctx = Context(tokenizer, sampler, reward, np.random.default_rng(0), tokenizer.pad_id, model, nnx.state(model),
                  formats=RowFormats(critique_check=stub_check))
    batch, metrics = method.build(ro, ctx)
    _, _, _, plain_batch, plain_metrics = build_once(tokenizer, model, REWARDS)
    assert metrics["critique/rows"] == plain_metrics["critique/rows"] == 8
    adv, plain_adv = np.asarray(batch.advantages), np.asarray(plain_batch.advantages)
    for i, j in zip(rows_of(batch, "critique"), rows_of(plain_batch, "critique")):
        toks, pos = completion(batch, i)
        prompt_text = tokenizer.decode(np.asarray(batch.tokens[i])[:pos[0]].tolist())
        assert "First check the solution, one line per constraint" in prompt_text
        attempt = prompt_text.split("Solution:\n")[1].split("\n")[0]
        head = f"{stub_check('', attempt)}\nERROR_FOUND: {'true' if 'WRONG' in attempt else 'false'}\n"
        forced = tokenizer.encode(head)
        assert toks[:len(forced)] == forced, tokenizer.decode(toks[:len(forced)])
        np.testing.assert_allclose(adv[i, pos][:len(forced)], 1.0)
        # the rest: the same advantage as the same critique without the check (the selection is seeded alike)
        _, plain_pos = completion(plain_batch, j)
        np.testing.assert_allclose(adv[i, pos][len(forced):], plain_adv[j, plain_pos][-len(pos) + len(forced):])
    # the critique budget counts the generated rest only
    assert sampler.calls[0]["max_new_tokens"] == 64


def test_solve_group_is_enlarged_by_replay(built, tokenizer):
    _, ro, _, batch, _ = built
    adv = np.asarray(batch.advantages)
    solve = rows_of(batch, "solve")
    right = tokenizer.encode("fresh RIGHT sum") + [tokenizer.eos_id]
    # q0's group: 4 wrong + 2 replayed right; mean 1/3, std = sqrt((4 * 1/9 + 2 * 4/9) / 5) = sqrt(12/45)
    std = np.sqrt(12 / 45)
    plain0 = ro.prompts[0]
    assert len(solve) == 18
    for i in solve[16:]:
        toks, pos = completion(batch, i)
        assert toks == right
        assert np.asarray(batch.tokens[i])[:pos[0]].tolist() == plain0  # the plain prompt, hint hidden
        np.testing.assert_allclose(adv[i, pos], (2 / 3) / std, rtol=1e-4)
    for i in solve[:4]:
        _, pos = completion(batch, i)
        np.testing.assert_allclose(adv[i, pos], -(1 / 3) / std, rtol=1e-4)


def test_hard_batch_builds_critiques_guided_solutions_and_capped_replay(hard_built, tokenizer):
    _, ro, sampler, batch, metrics = hard_built
    # the earlier balanced selection gave this batch no critique, hence no guided solution and no replay
    assert metrics["critique/rows"] == 8 and metrics["critique/wrong_frac"] == 0.5
    assert metrics["guided_solve/rows"] == 4 * M
    # 4 critiques of q0 x 2 right guided solutions = 8 successes, capped at K = 4
    assert metrics["replay/rows"] == 4 and metrics["replay/queries"] == 1
    adv = np.asarray(batch.advantages)
    solve = rows_of(batch, "solve")
    assert len(solve) == 8 + 4
    std = np.sqrt(8 * 0.25 / 7)  # 4 wrong + 4 right
    for i, sign in [(solve[0], -1), (solve[8], 1)]:
        _, pos = completion(batch, i)
        np.testing.assert_allclose(adv[i, pos], sign * 0.5 / std, rtol=1e-4)  # +-0.94
    critiqued = [tokenizer.decode(p).split("Solution:\n")[1].split("\n")[0] for p in sampler.calls[0]["prompts"]]
    assert sorted(c for c in critiqued if "WRONG" in c) == [f"attempt q0s{s} WRONG" for s in range(4)]


def test_recomputed_old_logprobs_match_a_fresh_forward(built, model, tokenizer):
    _, ro, sampler, batch, _ = built
    old = np.asarray(batch.old_logprobs)
    params = nnx.state(model)
    for i in rows_of(batch, "solve")[16:18]:  # replayed: pi_old under the plain solve prompt
        toks, pos = completion(batch, i)
        ref = completion_logprobs(model, params, [ro.prompts[0]], [toks])[0]
        np.testing.assert_allclose(old[i, pos], ref, atol=2e-5)
    # teacher-forced verdict tokens: scored under the critique prompt; the generated rest keeps the sampler's
    i = rows_of(batch, "critique")[0]
    toks, pos = completion(batch, i)
    n_v = len(tokenizer.encode("ERROR_FOUND: false\n"))
    prompt = np.asarray(batch.tokens[i])[:pos[0]].tolist()
    ref = completion_logprobs(model, params, [prompt], [toks[:n_v]])[0]
    np.testing.assert_allclose(old[i, pos[:n_v]], ref, atol=2e-5)
    np.testing.assert_allclose(old[i, pos[n_v:]], -0.25 - 0.01 * np.arange(len(pos) - n_v), atol=1e-6)
    # the helper pads a short last chunk and keeps row order
    lps = completion_logprobs(model, params, [ro.prompts[0]] * 3, [toks[:3], toks[:5], toks[:2]], rows_per_call=2)
    assert [len(x) for x in lps] == [3, 5, 2]
    np.testing.assert_allclose(lps[1][:3], lps[0], atol=1e-5)


def test_one_update_raises_the_replayed_solution_under_the_plain_prompt(built, model, tokenizer):
    method, ro, _, batch, _ = built
    graphdef, params = nnx.split(model)
    right = tokenizer.encode("fresh RIGHT sum") + [tokenizer.eos_id]

    def logp(p):
        return float(completion_logprobs(model, p, [ro.prompts[0]], [right])[0].sum())

    update = make_update(graphdef, optax.sgd(0.5), method.terms())

    def updated(b):
        p = jax.tree.map(jnp.copy, params)
        return update(p, optax.sgd(0.5).init(p), b).params

    before = logp(params)
    after = logp(updated(batch))
    # the counterfactual: the replayed rows turned into filler rows (same shape, so no second compilation)
    task = np.asarray(batch.task_id).copy()
    task[rows_of(batch, "solve")[16:]] = PAD_TASK_ID
    no_replay = logp(updated(batch._replace(task_id=task)))
    assert after > before, (before, after)
    assert after - before > no_replay - before, (before, after, no_replay)


# ------------------------------------------------------------------------------------------ configs, train


CONFIGS = PRESET_DIR


def _configs():
    """get_config of jaxrl_reason/configs/cure.py and cure_qwen25_7b_4gpu.py, loaded as train.py loads them."""
    from jaxrl_reason.configs import load_config_file

    return [lambda n=n: load_config_file(os.path.join(CONFIGS, n)) for n in ("cure.py", "cure_qwen25_7b_4gpu.py")]


def test_configs_build_the_method():
    for get_config in _configs():
        cfg = get_config()
        m = make_method({**cfg.method.to_dict(), "max_len": cfg.rl.max_new_tokens})
        assert isinstance(m, CURE)
        assert m.critique_acc_range == (0.0, 0.9) and m.replay_acc_range == (0.0, 0.0)
        assert m.verdict_advantage == 1.0 and m.critique_advantage_scale == 2.0
        assert m.critique_batch_size == 0 and m.critique_zero_pass_floor == 0.125  # Q*K/2; the authors' 32 of 256
        assert m.max_replay_per_query == 0 and m.task_pooling == "per_task"  # at most K; the paper's per-task means


@pytest.mark.slow
def test_cure_trains_end_to_end_through_train_py(tmp_path):
    import json

    from jaxrl_reason.experiment.pipeline import run

    cfg = _configs()[0]()
    cfg.workdir = str(tmp_path / "run")
    cfg.data.train_size, cfg.data.heldout_size = 300, 8
    cfg.model.hidden_size, cfg.model.num_hidden_layers, cfg.model.intermediate_size = 32, 2, 64
    cfg.sft.steps, cfg.sft.examples, cfg.sft.batch_size = 20, 100, 8
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.samples_per_prompt, cfg.rl.max_new_tokens = 2, 4, 4, 24
    cfg.method.extra.critique_max_new_tokens = 16
    # 20 warm-up steps leave most queries zero-pass: the fixed-size selection still critiques them (8 = Q*K/2 rows
    # when a correct sample exists, the wrong half only when none does).
    cfg.method.extra.critique_batch_size = 8
    cfg.rl.progress = False
    results = run(cfg)
    assert "after" in results
    rows = [json.loads(x) for x in open(os.path.join(cfg.workdir, "logs", "metrics.jsonl"))]
    rows = [r for r in rows if "loss/total" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert np.isfinite(r["loss/total"]) and r["critique/rows"] in (4, 8)
        assert r["guided_solve/rows"] == 4 * r["critique/wrong_frac"] * cfg.method.extra.guided_samples
        assert r["critique/tokens"] > 0 and np.isfinite(r["loss/critique"]) and "replay/rows" in r


# ------------------------------------------------------------------------------------------ self-refinement


class _Ex:
    def __init__(self, question, answer):
        self.question, self.answer = question, answer


def _ok(texts, examples):
    return RewardResult(np.array([f"ANSWER {e.answer}" in t for t, e in zip(texts, examples)], np.float32),
                        [{}] * len(texts))


def scripted_generate(tok, *, solve, critic):
    """solve(question) -> first attempt; critic(question, attempt) -> critique text; guided prompts are answered
    correctly. Every call is recorded."""
    calls = []

    def generate(prompts, *, max_new_tokens):
        out = []
        for p in prompts:
            text = tok.decode(p)
            question = text.split("QUESTION[")[1].split("]")[0]
            if "Find the earliest error" in text:
                attempt = text.split("Solution:\n")[1].split("\n\nReply")[0]
                reply = critic(question, attempt)
                calls.append(("critique", question))
            elif "Guidance for solving" in text:
                reply = f"fresh ANSWER {question}"
                calls.append(("guided", question))
            else:
                reply = solve(question)
                calls.append(("solve", question))
            out.append(tok.encode(reply)[:max_new_tokens])
        return out

    return generate, calls


def _critique(error):
    return (f"ERROR_FOUND: {'true' if error else 'false'}\nERROR_QUOTE: x\nWHY_IT_MATTERS: y\n"
            f"HIGH_LEVEL_HINT: {HINT}")


def test_self_refine_stops_on_no_error_and_fixes_the_rest(tokenizer):
    ex = [_Ex(f"QUESTION[{i}]", str(i)) for i in range(6)]
    solve = lambda q: f"ANSWER {q}" if int(q) % 2 == 0 else "ANSWER wrong"  # 0, 2, 4 right
    critic = lambda q, attempt: _critique("wrong" in attempt)  # an honest critic
    gen, calls = scripted_generate(tokenizer, solve=solve, critic=critic)
    res = self_refine(None, tokenizer, ex, _ok, rounds=3, max_new_tokens=40, generate=gen)
    assert res.correct.shape == (4, 6) and res.tokens.shape == (4, 6) and res.verdicts.shape == (3, 6)
    np.testing.assert_allclose(res.accuracy, [0.5, 1.0, 1.0, 1.0])
    assert res.verdicts[0].tolist() == [VERDICT_NO_ERROR, VERDICT_ERROR] * 3
    # round 2: the re-solved rows are judged right and settle; round 3 critiques no one
    assert res.verdicts[1].tolist() == [NOT_CRITIQUED, VERDICT_NO_ERROR] * 3
    assert np.all(res.verdicts[2] == NOT_CRITIQUED)
    assert res.stopped.tolist() == [1, 2] * 3
    assert calls.count(("guided", "1")) == 1 and calls.count(("critique", "0")) == 1  # no work after settling
    assert res.tokens[3].sum() == 0 and np.all(res.tokens[1] > 0)
    # tokens: exactly the generated ids of every call
    expected0 = [len(tokenizer.encode(solve(str(i)))) for i in range(6)]
    assert res.tokens[0].tolist() == expected0
    assert res.verdict_metrics()["f1"] == 1.0 and res.verdict_metrics()["critiqued"] == 9
    s = res.summary()
    assert s["refine/round1/accuracy"] == 1.0 and s["refine/verdict_f1"] == 1.0
    assert s["refine/round3/tokens_per_example"] == s["refine/round2/tokens_per_example"]


def test_self_refine_re_solves_in_the_guided_layout_it_is_given(tokenizer):
    ex = [_Ex(f"QUESTION[{i}]", str(i)) for i in range(2)]
    gen, calls = scripted_generate(tokenizer, solve=lambda q: "ANSWER wrong", critic=lambda q, a: _critique(True))
    seen = []

    def recording(prompts, *, max_new_tokens):
        seen.extend(tokenizer.decode(p) for p in prompts)
        return gen(prompts, max_new_tokens=max_new_tokens)

    res = self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=recording,
                      guided_layout="first")
    guided = [t for t in seen if "Guidance for solving" in t]
    assert len(guided) == 2 and res.accuracy.tolist() == [0.0, 1.0]
    assert all(t.split("user\n")[1].startswith("Guidance for solving the problem below") for t in guided)
    with pytest.raises(ValueError, match="guided_layout must be one of"):
        self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=gen, guided_layout="before")


def test_self_refine_with_a_worked_check_asks_for_it_and_reads_the_verdict_after_it(tokenizer):
    """critique_format='worked_check': the critique prompt asks for the check first, and a critique whose check
    lines stand before its fields parses as a whole (the verdict after the check decides the round)."""
    ex = [_Ex(f"QUESTION[{i}]", str(i)) for i in range(4)]
    seen = []

    def generate(prompts, *, max_new_tokens):
        out = []
        for p in prompts:
            text = tokenizer.decode(p)
            seen.append(text)
            q = text.split("QUESTION[")[1].split("]")[0]
            if "Find the earliest error" in text:
                attempt = text.split("Solution:\n")[1].split("\n\n")[0]
                bad = "wrong" in attempt
                reply = f"Row 1: {'repeat' if bad else 'ok'}\nCol 1: ok\n" + _critique(bad)
            elif "Guidance for solving" in text:
                reply = f"fresh ANSWER {q}"
            else:
                raise AssertionError(text)
            out.append(tokenizer.encode(reply)[:max_new_tokens])
        return out

    initial = [f"ANSWER {i}" if i < 2 else "ANSWER wrong" for i in range(4)]
    res = self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=generate, initial=initial,
                      critique_format="worked_check", critique_max_new_tokens=200)
    critiques = [t for t in seen if "Find the earliest error" in t]
    assert len(critiques) == 4 and all("First check the solution, one line per constraint" in t for t in critiques)
    assert res.verdicts[0].tolist() == [VERDICT_NO_ERROR] * 2 + [VERDICT_ERROR] * 2
    # the check lines do not count against the format (the error critiques' one-letter quote does)
    assert res.accuracy.tolist() == [0.5, 1.0] and res.well_formed[0].tolist() == [True, True, False, False]
    with pytest.raises(ValueError, match="critique_format must be one of"):
        self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=generate, critique_format="x")


def test_self_refine_from_given_first_solutions_does_not_solve_again(tokenizer):
    # Round 0 handed in (an evaluation pool's first samples): no solve call, its tokens are the given counts.
    ex = [_Ex(f"QUESTION[{i}]", str(i)) for i in range(2)]
    critic = lambda q, attempt: _critique("wrong" in attempt)
    gen, calls = scripted_generate(tokenizer, solve=lambda q: "unused", critic=critic)
    res = self_refine(None, tokenizer, ex, _ok, rounds=2, max_new_tokens=40, generate=gen,
                      initial=["ANSWER 0", "ANSWER wrong"], initial_tokens=[5, 9])
    assert not any(kind == "solve" for kind, _ in calls)
    assert res.tokens[0].tolist() == [5, 9] and res.correct[0].tolist() == [True, False]
    assert res.stopped.tolist() == [1, 2] and res.accuracy.tolist() == [0.5, 1.0, 1.0]
    # the scripted error critique quotes "x", shorter than a quote may be: not well-formed
    assert res.well_formed[0].tolist() == [True, False] and res.well_formed_share() == pytest.approx(2 / 3)  # 3 critiques, 1 bad
    with pytest.raises(ValueError, match="one each"):
        self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=gen, initial=["only one"])


def test_strict_verdict_f1_scores_an_unparsed_verdict_as_the_wrong_call():
    from jaxrl_reason.inference.refine import VERDICT_UNPARSED, RefineResult

    # 4 solutions, 3 wrong; the critic writes no parsable verdict at all
    res = RefineResult(correct=np.array([[True, False, False, False], [True, False, False, False]]),
                       tokens=np.zeros((2, 4), np.int64), verdicts=np.full((1, 4), VERDICT_UNPARSED, np.int8),
                       stopped=np.full((4,), -1), solutions=[""] * 4, critiques=[""] * 4,
                       well_formed=np.zeros((1, 4), bool))
    loose, strict = res.verdict_metrics(1), res.verdict_metrics(1, strict=True)
    assert loose["recall"] == 1.0 and loose["f1"] == pytest.approx(2 * 0.75 / 1.75)  # the base rate, flattered
    assert strict["f1"] == 0.0 and strict["accuracy"] == 0.0 and res.verdict_parsed_share(1) == 0.0


def test_self_refine_trusts_a_lying_critic_and_scores_it(tokenizer):
    ex = [_Ex(f"QUESTION[{i}]", str(i)) for i in range(4)]
    solve = lambda q: "ANSWER wrong" if q in ("0", "1") else f"ANSWER {q}"
    # says "no error" about q0's wrong attempt, and "error" about q2's right one
    critic = lambda q, attempt: _critique(q in ("1", "2"))
    gen, _ = scripted_generate(tokenizer, solve=solve, critic=critic)
    res = self_refine(None, tokenizer, ex, _ok, rounds=1, max_new_tokens=40, generate=gen)
    assert res.stopped.tolist() == [1, -1, -1, 1]
    assert res.correct[1].tolist() == [False, True, True, True]  # q0 kept its wrong answer
    # round 1 verdicts: pred error [F, T, T, F] vs wrong [T, T, F, F]: tp 1, fp 1, fn 1
    m = res.verdict_metrics(1)
    assert m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5 and m["accuracy"] == 0.5
    assert verdict_scores(np.zeros(0, bool), np.zeros(0, bool))["f1"] == 0.0


@pytest.mark.slow  # 26 s a call on 2 shared cores (2026-12-07)
def test_self_refine_with_a_tiny_model(tokenizer, model):
    ex = arithmetic_examples(2, seed=11, config=ARITH)

    def math_reward(texts, examples):
        return RewardResult(np.array([f"\\boxed{{{e.answer}}}" in t for t, e in zip(texts, examples)], np.float32),
                            [{}] * len(texts))

    res = self_refine(model, tokenizer, ex, math_reward, rounds=1, max_new_tokens=8, critique_max_new_tokens=8,
                      params=nnx.state(model))
    assert res.correct.shape == (2, 2) and res.verdicts.shape == (1, 2) and res.tokens.shape == (2, 2)
    assert np.all(res.tokens[0] >= 1) and np.all(res.tokens[0] <= 8)
    # an untrained model writes no parsable verdict: every row is critiqued and re-solved (critique + solution)
    assert np.all(res.verdicts[0] == -1) and np.all(res.stopped == -1)
    assert np.all(res.tokens[1] >= 2) and np.all(res.tokens[1] <= 16)
    assert len(res.solutions) == 2 and res.accuracy.shape == (2,) and res.critiques[0] != ""


class HalfMassSampler(ScriptedSampler):
    """The scripted sampler, reporting q = pi_old / 2 for every sampled token (as a top-p nucleus of mass 1/2)."""

    def __call__(self, prompts, **kw):
        out = super().__call__(prompts, **kw)
        return out._replace(sampling_logprobs=np.where(out.logprobs != 0, out.logprobs - np.log(2.0), 0.0))


def test_truncated_importance_weights_reach_every_sampled_cure_row(tokenizer, model):
    ro = make_rollouts(tokenizer)
    ro = ro._replace(sampling_logprobs=[lp - np.log(1.5) for lp in ro.logprobs])  # solve samples: weight 1.5

    def build(tis):
        loss = dataclasses.replace(PAPER_LOSS, tis=tis, tis_cap=1.8)
        method = CURE("grpo", loss, guided_samples=M, critique_advantage_scale=C, critique_max_new_tokens=64)
        ctx = Context(tokenizer, HalfMassSampler(tokenizer), reward, np.random.default_rng(0), tokenizer.pad_id,
                      model, nnx.state(model))
        return method.build(ro, ctx)

    (plain, _), (weighted, m) = build("off"), build("token")
    a, w = np.asarray(plain.advantages), np.asarray(weighted.advantages)
    trained = np.asarray(plain.loss_mask) != 0
    ratio = lambda rows: np.unique(np.round(w[rows][trained[rows]] / a[rows][trained[rows]], 4))
    nz = lambda rows: [r for r in rows if np.any(a[r][trained[r]] != 0)]
    solve = rows_of(plain, "solve")
    q, k = ro.rewards.shape
    np.testing.assert_allclose(ratio(nz(solve[:q * k])), [1.5])  # the plain solve samples
    if len(solve) > q * k:
        np.testing.assert_allclose(ratio(nz(solve[q * k:])), [1.0])  # replayed: not sampled from this prompt
    np.testing.assert_allclose(ratio(nz(rows_of(plain, "guided_solve"))), [1.8])  # capped at 1.8
    n_v = len(tokenizer.encode("ERROR_FOUND: false\n"))
    for i in rows_of(plain, "critique"):
        pos = np.flatnonzero(trained[i])
        np.testing.assert_allclose(w[i, pos[:n_v]], a[i, pos[:n_v]])  # forced verdict: weight 1
        np.testing.assert_allclose(w[i, pos[n_v:]], 1.8 * a[i, pos[n_v:]], rtol=1e-5)
    assert m["tis/capped_frac"] > 0
