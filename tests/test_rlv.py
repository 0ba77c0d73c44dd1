"""RL^V: verify rows come from the batch itself, class-balanced, and the verify term teaches the verdict."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import verify_prompt
from jaxrl_reason.inference.verifier import score, verify_rows
from jaxrl_reason.methods.base import Context
from jaxrl_reason.methods.rlv import RLV, balanced_indices
from jaxrl_reason.rl.batch import TASKS, build_token_batch
from jaxrl_reason.train.metrics import MetricsWriter, read_metrics
from jaxrl_reason.train.state import make_optimizer
from jaxrl_reason.train.trainer import Trainer, TrainerConfig
from jaxrl_reason.train.update import make_update

from tiny import ARITH, arith_tokenizer, scripted_rollouts, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    ex = arithmetic_examples(50, seed=1, config=ARITH)
    return arith_tokenizer(tmp_path_factory.mktemp("tok"), n=300,
                           extra_texts=[verify_prompt(e.question, e.solution) for e in ex])


def test_balanced_indices():
    rng = np.random.default_rng(0)
    labels = np.array([1, 0, 0, 0, 1, 0, 0, 0], bool)
    idx = balanced_indices(labels, rng)
    assert len(idx) == 4 and labels[idx].sum() == 2
    assert len(balanced_indices(np.zeros(5, bool), rng)) == 0  # one class missing: nothing to balance
    assert len(balanced_indices(labels, rng, balance="none")) == 8
    assert len(balanced_indices(labels, rng, max_rows=2)) == 2
    with pytest.raises(ValueError, match="balance"):
        balanced_indices(labels, rng, balance="oversample")


def test_per_question_balance_takes_equal_classes_within_each_question():
    rng = np.random.default_rng(0)
    # question 0: 3 right, 1 wrong; question 1: all right; question 2: 1 right, 2 wrong; question 3: all wrong
    labels = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0], bool)
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3])
    for _ in range(5):
        idx = balanced_indices(labels, rng, balance="per_question", groups=groups)
        assert sorted(groups[idx].tolist()) == [0, 0, 2, 2]  # one of each class from each mixed question
        for g in (0, 2):
            assert labels[idx][groups[idx] == g].sum() == 1
    # batch-level balance would happily pair question 1's right samples with question 3's wrong ones
    assert set(groups[balanced_indices(labels, rng)].tolist()) - {0, 2}
    assert len(balanced_indices(labels[4:8], rng, balance="per_question", groups=groups[4:8])) == 0
    with pytest.raises(ValueError, match="groups"):
        balanced_indices(labels, rng, balance="per_question")


@pytest.mark.slow  # 30 s a call on 2 shared cores (2026-12-07)
def test_verify_term_raises_yes_on_correct_and_no_on_wrong(tokenizer):
    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    ex = arithmetic_examples(4, seed=3, config=ARITH)
    questions = [e.question for e in ex] * 2
    # wrong solutions a tiny random model can tell apart within a few updates: a bare, wrong guess
    wrong = [f"I guess. The answer is \\boxed{{{int(e.answer) + 1}}}." for e in ex]
    solutions = [e.solution for e in ex] + wrong
    labels = np.array([1] * 4 + [0] * 4)
    rows = verify_rows(tokenizer, questions, solutions, labels)
    batch = build_token_batch(rows.prompts, [[int(t)] for t in rows.targets], [0.0] * 8, None, "verify")
    method = RLV("grpo", verify_weight=1.0)
    verify_only = tuple(t for t in method.terms() if t.name == "verify")
    opt = make_optimizer(1e-2, total_steps=30, clip_norm=0.0)
    update = make_update(graphdef, opt, verify_only)
    before = score(model, tokenizer, questions, solutions, normalize=True, state=params)
    p, o = jax.tree.map(jnp.copy, params), opt.init(params)
    for _ in range(25):
        out = update(p, o, batch)
        p, o = out.params, out.opt_state
    after = score(model, tokenizer, questions, solutions, normalize=True, state=p)
    assert (after[:4] > before[:4]).all(), (before, after)  # P(Yes) up on correct solutions
    assert (after[4:] < before[4:]).all(), (before, after)  # P(No) up on wrong ones
    assert after[:4].min() > after[4:].max()  # and the verifier now separates them


def fake_rollouts(tokenizer, rewards):
    ex = arithmetic_examples(rewards.shape[0], seed=5, config=ARITH)
    g = rewards.shape[1]
    return scripted_rollouts(tokenizer, rewards, [ex[i // g].solution for i in range(rewards.size)], logprob=-1.0,
                             max_tokens=20)


def test_rlv_build_adds_balanced_verify_rows(tokenizer):
    model = tiny_model(tokenizer)
    rewards = np.array([[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]])
    ro = fake_rollouts(tokenizer, rewards)
    ctx = Context(tokenizer, None, None, np.random.default_rng(0), tokenizer.pad_id, model, nnx.state(model))
    batch, metrics = RLV("rloo").build(ro, ctx)
    n_pos = int(rewards.sum())
    n_verify = 2 * min(n_pos, rewards.size - n_pos)
    task = np.asarray(batch.task_id)
    assert (task == TASKS["solve"]).sum() == rewards.size and (task == TASKS["verify"]).sum() == n_verify
    assert metrics["verify/rows"] == n_verify and metrics["verify/positive_frac"] == 0.5
    assert 0.0 <= metrics["verify/acc_positive"] <= 1.0 and 0.0 <= metrics["verify/acc_negative"] <= 1.0
    v = task == TASKS["verify"]
    # one trained token per verify row: the verdict, "Yes" for r=1 rows and "No" for r=0
    assert (np.asarray(batch.loss_mask)[v].sum(-1) == 1).all()
    yes, no = tokenizer.single_token_id("Yes"), tokenizer.single_token_id("No")
    targets = np.asarray(batch.tokens)[v][np.asarray(batch.loss_mask)[v] > 0]
    assert sorted(targets.tolist()) == sorted([yes] * (n_verify // 2) + [no] * (n_verify // 2))

    # lambda = 0 (a sweep's baseline): the same verifier is measured on the same rows, and no verify row is trained
    off, off_metrics = RLV("rloo", verify_weight=0.0).build(ro, ctx._replace(rng=np.random.default_rng(0)))
    assert (np.asarray(off.task_id) == TASKS["solve"]).all() and np.asarray(off.task_id).shape[0] == rewards.size
    assert "verify/rows" not in off_metrics
    for k in ("acc_positive", "acc_negative", "balanced_acc"):
        assert off_metrics[f"verify/{k}"] == metrics[f"verify/{k}"]
    _, quiet = RLV("rloo", verify_weight=0.0, measure_verifier=False).build(ro, ctx)
    assert not any(k.startswith("verify/") for k in quiet)


@pytest.mark.slow  # 74 s a call on 2 shared cores (2026-12-07)
def test_rlv_trains_inside_the_trainer(tokenizer, tmp_path):
    model = tiny_model(tokenizer, seed=2)
    cfg = TrainerConfig(steps=2, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=10, lr=1e-3,
                        checkpoint_every=0, progress=False)
    ex = arithmetic_examples(32, seed=9, config=ARITH)
    # a reward that marks half of each group correct, so the verifier always has both classes
    def reward(texts, examples):
        from jaxrl_reason.rewards.base import RewardResult

        scores = np.array([i % 2 for i in range(len(texts))], np.float32)
        return RewardResult(scores, [{}] * len(texts))

    tr = Trainer(model, tokenizer, RLV("grpo", verify_weight=0.5), ex, reward, cfg, str(tmp_path))
    hist = tr.run()
    tr.close()
    for m in hist:
        assert m["verify/rows"] == 16
        assert np.isfinite(m["loss/verify"]) and m["loss/verify"] > 0
        assert "verify/acc_positive" in m and "verify/acc_negative" in m
        assert m["verify/nll"] == pytest.approx(m["loss/verify"], rel=1e-5)


@pytest.mark.slow
def test_verify_warmup_teaches_the_verdict_on_self_labelled_samples(tokenizer):
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.train.verify_warmup import verify_warmup

    # A label the verifier can read off the solution text: does it contain a digit? ~15% of a random policy's
    # 4-token samples do, so the warm-up has two classes to balance.
    def reward(texts, examples):
        return RewardResult(np.array([any(c.isdigit() for c in t) for t in texts], np.float32), [{}] * len(texts))

    model = tiny_model(tokenizer, seed=4)
    ex = arithmetic_examples(96, seed=11, config=ARITH)
    res = verify_warmup(model, tokenizer, ex, reward, steps=80, batch_size=32, solve_batch_size=4, lr=1e-2,
                        samples_per_question=4, max_new_tokens=4, temperature=1.0, holdout_frac=0.25, seed=0,
                        progress=False, warmup_steps=10, balance="subsample")
    assert 0.05 < res["positive_frac_sampled"] < 0.95, res
    before, after = res["before"], res["after"]
    # A model never shown the verify format puts almost no mass on "Yes"; afterwards it answers the question...
    assert before["p_yes_mean"] < 0.05 and after["p_yes_mean"] > 0.2, (before, after)
    # ...and its verdicts on held-out questions' samples follow the label.
    assert after["balanced_acc"] >= 0.8 and after["balanced_acc"] > before["balanced_acc"] + 0.2, (before, after)
    assert len(res["history"]) == 80 and res["history"][-1]["verify_warmup/nll"] < res["history"][0]["verify_warmup/nll"]


@pytest.mark.slow  # 204 s a call on 2 shared cores (2026-12-07)
def test_verification_warmup_stopped_midway_resumes_to_the_same_model(tokenizer, tmp_path):
    """train_verdicts(checkpoint_dir=): cut after 5 of 9 steps (saves every 3) and run again from another init with
    too few steps left to get there from scratch, it draws the same rows (the generator state is saved) and the
    same worked solutions, and ends at the uninterrupted run's params."""
    from jaxrl_reason.train.verify_warmup import train_verdicts

    ex = arithmetic_examples(24, seed=2, config=ARITH)
    rows = verify_rows(tokenizer, [e.question for e in ex], [e.solution for e in ex],
                       np.arange(len(ex)) % 2 == 0)
    kw = dict(steps=9, batch_size=6, solve_batch_size=2, lr=1e-2, warmup_steps=2, seed=3, progress=False)

    def run(model, **more):
        return train_verdicts(model, tokenizer, rows, ex, rng=np.random.default_rng([3, 1]), **kw, **more)

    straight = tiny_model(tokenizer)
    hist = run(straight)
    ck = str(tmp_path / "verify")
    log = MetricsWriter(str(tmp_path / "logs"), tensorboard=False)
    assert len(run(tiny_model(tokenizer), checkpoint_dir=ck, checkpoint_every=3, stop_after=5, writer=log)) == 5
    resumed = tiny_model(tokenizer, seed=7)
    rest = run(resumed, checkpoint_dir=ck, checkpoint_every=3, stop_after=6, writer=log)  # from step 3: 4..9
    log.close()
    assert [m["verify_warmup/nll"] for m in rest] == pytest.approx([m["verify_warmup/nll"] for m in hist], rel=1e-5)
    logged = read_metrics(str(tmp_path / "logs"))  # steps 4-5, trained twice, logged once
    assert [r["step"] for r in logged] == list(range(1, 10))
    assert [r["verify_warmup/nll"] for r in logged] == pytest.approx([m["verify_warmup/nll"] for m in hist], rel=1e-5)
    for a, b in zip(jax.tree.leaves(nnx.state(resumed)), jax.tree.leaves(nnx.state(straight))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="warm-up checkpoint in .* saved with steps=9, this run has steps=12"):
        train_verdicts(tiny_model(tokenizer), tokenizer, rows, ex, checkpoint_dir=ck, **{**kw, "steps": 12})


@pytest.mark.slow
def test_verify_warmup_contrast_pairs_teach_what_self_labels_cannot(tokenizer):
    """Self-labelled rows here say "has a digit -> Yes"; the contrast pairs add (worked solution, Yes) beside a
    copy marked wrong by "!" line ends (No). With them the verifier tells a held-out question's marked copy from its
    solution; without them it cannot (both have digits)."""
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.train.verify_warmup import verify_warmup

    def reward(texts, examples):
        return RewardResult(np.array([any(c.isdigit() for c in t) for t in texts], np.float32), [{}] * len(texts))

    def marked(e, rng):
        return "\n".join(line + " !" for line in e.solution.splitlines())

    ex = arithmetic_examples(96, seed=11, config=ARITH)
    heldout = arithmetic_examples(24, seed=12, config=ARITH)
    margins = {}
    for name, fn in (("contrast", marked), ("self-labelled only", None)):
        model = tiny_model(tokenizer, seed=4)
        res = verify_warmup(model, tokenizer, ex, reward, steps=60, batch_size=32, solve_batch_size=0, lr=1e-2,
                            samples_per_question=4, max_new_tokens=4, temperature=1.0, holdout_frac=0.25, seed=0,
                            progress=False, contrast_fn=fn, warmup_steps=10, balance="subsample")
        if fn is None:
            assert res["contrast_rows"] == 0
        else:
            assert 0 < res["contrast_rows"] <= 2 * len(ex) and res["contrast_rows"] % 2 == 0
        qs = [e.question for e in heldout]
        right = score(model, tokenizer, qs, [e.solution for e in heldout], normalize=True)
        wrong = score(model, tokenizer, qs, [marked(e, None) for e in heldout], normalize=True)
        margins[name] = float(np.mean(right - wrong))
    assert margins["contrast"] > 0.3 and margins["self-labelled only"] < 0.15, margins


@pytest.mark.slow
def test_verify_warmup_on_contrast_pairs_alone_never_samples(tokenizer):
    """samples_per_question=0: the verdict is trained on contrast pairs only (no sampling, no reward calls) and
    judged on the pairs of held-out questions."""
    from jaxrl_reason.train.verify_warmup import verify_warmup

    def reward(texts, examples):
        raise AssertionError("pairs-only warm-up must not sample or grade")

    def marked(e, rng):
        return "\n".join(line + " !" for line in e.solution.splitlines())

    ex = arithmetic_examples(96, seed=11, config=ARITH)
    model = tiny_model(tokenizer, seed=4)
    res = verify_warmup(model, tokenizer, ex, reward, steps=60, batch_size=32, solve_batch_size=0, lr=1e-2,
                        samples_per_question=0, holdout_frac=0.25, seed=0, progress=False, contrast_fn=marked,
                        warmup_steps=10, max_new_tokens=64, temperature=0.7, balance="subsample")
    assert res["rows"] == 0 and res["sampled"] == 0
    assert res["contrast_rows"] == 2 * 72 and res["heldout_rows"] == 2 * 24, res
    before, after = res["before"], res["after"]
    assert after["balanced_acc"] >= 0.9 and after["balanced_acc"] > before["balanced_acc"] + 0.3, (before, after)
    with pytest.raises(ValueError, match="samples_per_question=0.*contrast_fn"):
        verify_warmup(model, tokenizer, ex, reward, steps=2, samples_per_question=0, progress=False, batch_size=32,
                      solve_batch_size=8, lr=1e-3, warmup_steps=10, max_new_tokens=64, temperature=0.7,
                      balance="subsample")


def test_verify_warmup_contrast_needs_worked_solutions(tokenizer):
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.data.datasets import Example
    from jaxrl_reason.train.verify_warmup import verify_warmup

    half = lambda texts, ex: RewardResult(np.arange(len(texts)) % 2 == 0, [{}] * len(texts))  # noqa: E731
    ex = [Example(e.question, e.answer, e.id) for e in arithmetic_examples(8, seed=11, config=ARITH)]
    with pytest.raises(ValueError, match="worked solution"):
        verify_warmup(tiny_model(tokenizer), tokenizer, ex, half, steps=2, max_new_tokens=4, solve_batch_size=0,
                      progress=False, contrast_fn=lambda e, rng: "x", batch_size=32, lr=1e-3, warmup_steps=10,
                      samples_per_question=4, temperature=0.7, balance="subsample")


def test_verify_warmup_refuses_a_single_class(tokenizer):
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.train.verify_warmup import verify_warmup

    always_right = lambda texts, ex: RewardResult(np.ones(len(texts), np.float32), [{}] * len(texts))  # noqa: E731
    with pytest.raises(ValueError, match="too few of one class"):
        verify_warmup(tiny_model(tokenizer), tokenizer, arithmetic_examples(8, seed=11, config=ARITH), always_right,
                      steps=2, max_new_tokens=4, progress=False, batch_size=32, solve_batch_size=8, lr=1e-3,
                      warmup_steps=10, samples_per_question=4, temperature=0.7, balance="subsample")
