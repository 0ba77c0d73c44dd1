"""The RL loop: updates move log-probs the predicted way, accumulation is exact, NaNs are refused, and a run
killed after step k resumes to exactly the metrics of an uninterrupted run."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig
from jaxrl_reason.rewards.math import math_reward
from jaxrl_reason.buckets import SCORED_BUCKETS
from jaxrl_reason.rl.batch import build_token_batch, concat_batches, scored_size
from jaxrl_reason.rl.losses import pg_spec, sft_spec
from jaxrl_reason.train.metrics import MetricsWriter, read_metrics
from jaxrl_reason.train.state import make_optimizer
from jaxrl_reason.train.trainer import NonFiniteLossError, Trainer, TrainerConfig
from jaxrl_reason.rl.scoring import model_logprobs, reference_logprobs
from jaxrl_reason.train.update import make_update

from tiny import ARITH, arith_tokenizer, assert_same_update, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return arith_tokenizer(tmp_path_factory.mktemp("tok"))


def reward_fn(texts, examples):
    return math_reward(texts, [e.answer for e in examples])


def small_batch(advantages):
    prompts = [[5, 6, 7], [5, 6, 8], [9, 10], [11, 12, 13, 14]]
    completions = [[20, 21, 22], [23, 24], [25, 26, 27, 28], [29]]
    return build_token_batch(prompts, completions, advantages, [[-3.0] * len(c) for c in completions], "solve",
                             length=16)


def seq_logprob(graphdef, params, batch):
    lp, _, _ = model_logprobs(graphdef, params, batch)
    return np.asarray((lp * batch.loss_mask).sum(-1))


def test_update_moves_logprobs_in_the_advantage_direction(tokenizer):
    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    batch = small_batch([1.0, -1.0, 0.0, 0.0])
    opt = make_optimizer(1e-2, total_steps=10, clip_norm=0.0)
    update = make_update(graphdef, opt, (pg_spec(("solve",)),))
    before = seq_logprob(graphdef, params, batch)
    batch = batch._replace(old_logprobs=np.asarray(model_logprobs(graphdef, params, batch)[0]) * batch.loss_mask)
    out = update(jax.tree.map(jnp.copy, params), opt.init(params), batch)
    after = seq_logprob(graphdef, out.params, batch)
    assert after[0] > before[0] + 1e-3  # positive advantage: more likely
    assert after[1] < before[1] - 1e-3  # negative advantage: less likely
    assert abs(float(out.metrics["logprob_gap/mean"])) < 1e-5  # old log-probs were the true ones


def test_micro_batches_equal_full_batch(tokenizer):
    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    import optax

    batch = small_batch([1.0, -0.5, 0.25, 2.0])
    opt = optax.sgd(1.0)  # plain SGD: the update is the gradient itself (Adam would amplify rounding in ~0 entries)
    results = []
    for mb in (1, 2, 4):
        terms = (pg_spec(("solve",), aggregation="seq_mean_token_mean"),)
        update = make_update(graphdef, opt, terms, micro_batches=mb)
        out = update(jax.tree.map(jnp.copy, params), opt.init(params), batch)
        results.append(out)
    for other in results[1:]:
        np.testing.assert_allclose(float(other.metrics["loss/pg"]), float(results[0].metrics["loss/pg"]), rtol=1e-5)
        for a, b in zip(jax.tree.leaves(other.params), jax.tree.leaves(results[0].params)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def length_parity_reward(texts, examples):
    """A deterministic function of the text that, unlike correctness on an untrained model, splits every group:
    so each step has a non-zero gradient and resume exactness is tested on real updates."""
    from jaxrl_reason.rewards.base import RewardResult

    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])


def make_trainer(tokenizer, workdir, steps=4, reward=reward_fn, **kw):
    model = tiny_model(tokenizer, seed=3)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=steps, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=12, lr=1e-3,
                        checkpoint_every=1, progress=False, seed=11, **kw)
    return Trainer(model, tokenizer, GRPO("grpo", PolicyLossConfig(beta=0.05)), train, reward, cfg, workdir)


KEYS = ("loss/pg", "loss/kl", "reward/mean", "length/mean", "grad_norm", "solve/clip_frac_high", "solve/kl_ref")


def test_kill_and_resume_is_exact(tokenizer, tmp_path):
    full = make_trainer(tokenizer, str(tmp_path / "a"), reward=length_parity_reward)
    ref = full.run()
    full.close()
    part = make_trainer(tokenizer, str(tmp_path / "b"), reward=length_parity_reward)
    first = part.run(stop_after=2)
    part.close()  # "killed" after step 2: a new process would start from the checkpoint on disk
    with open(tmp_path / "b" / "logs" / "metrics.jsonl", "a") as f:  # step 3 logged, killed before its save
        f.write(json.dumps({"step": 3, "loss/pg": 123.0}) + "\n")
    resumed = make_trainer(tokenizer, str(tmp_path / "b"), reward=length_parity_reward)
    assert int(resumed.state.step) == 2
    rest = resumed.run()
    resumed.close()
    assert len(first) == 2 and len(rest) == 2
    for a, b in zip(ref, first + rest):
        for k in KEYS:
            assert a[k] == b[k], (k, a[k], b[k])
    # the metrics really depend on the step (the comparison is not vacuous): every step updated the policy
    assert all(r["grad_norm"] > 0 for r in ref) and ref[0]["grad_norm"] != ref[3]["grad_norm"]
    logged = [json.loads(x) for x in open(tmp_path / "b" / "logs" / "metrics.jsonl")]
    assert [r["step"] for r in logged] == [1, 2, 3, 4]
    assert [r["loss/pg"] for r in logged] == [r["loss/pg"] for r in ref]  # step 3 as trained again


def test_nonfinite_loss_stops_step_and_keeps_checkpoint(tokenizer, tmp_path):
    tr = make_trainer(tokenizer, str(tmp_path / "n"), steps=3)
    tr.run(stop_after=1)
    saved_step = tr.ckpt.latest_step()
    good = jax.tree.map(np.asarray, tr.state.params)
    build = tr.method.build

    def poisoned(ro, ctx):
        batch, m = build(ro, ctx)
        return batch._replace(advantages=np.where(batch.loss_mask > 0, np.nan, 0.0).astype(np.float32)), m

    tr.method.build = poisoned
    with pytest.raises(NonFiniteLossError, match=r"step 2 .*non-finite value in .*pg"):
        tr.run()
    assert tr.ckpt.latest_step() == saved_step == 1
    for a, b in zip(jax.tree.leaves(good), jax.tree.leaves(tr.state.params)):
        np.testing.assert_array_equal(a, np.asarray(b))
    tr.close()


@pytest.mark.slow
def test_tiny_end_to_end_run(tmp_path):
    """experiments/train.py's run(): tokenizer -> model -> SFT -> eval -> GRPO -> eval -> HF checkpoint + plot."""
    import transformers

    from jaxrl_reason.configs.tiny_default import get_config as tiny_default
    from jaxrl_reason.experiment.pipeline import run

    cfg = tiny_default()
    cfg.workdir = str(tmp_path / "run")
    cfg.data.train_size, cfg.data.heldout_size = 300, 16
    cfg.data.min_operands = cfg.data.max_operands = 2
    cfg.model.hidden_size, cfg.model.num_hidden_layers, cfg.model.intermediate_size = 32, 2, 64
    cfg.tokenizer.vocab_size = 300
    cfg.sft.steps, cfg.sft.examples, cfg.sft.batch_size = 3, 100, 8
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.samples_per_prompt, cfg.rl.max_new_tokens = 2, 4, 4, 24
    cfg.rl.progress = False
    results = run(cfg)
    assert set(results["before"]) >= {"accuracy", "mean_length"} and "after" in results
    final = os.path.join(cfg.workdir, "final")
    hf = transformers.AutoModelForCausalLM.from_pretrained(final)
    assert hf.config.hidden_size == 32 and hf.config.num_hidden_layers == 2
    tok = transformers.AutoTokenizer.from_pretrained(final)
    assert tok.encode("What is 2 + 3?") == transformers.AutoTokenizer.from_pretrained(
        os.path.join(cfg.workdir, "tokenizer")).encode("What is 2 + 3?")
    assert os.path.exists(os.path.join(cfg.workdir, "rl_curve.png"))
    rows = [json.loads(x) for x in open(os.path.join(cfg.workdir, "logs", "metrics.jsonl"))]
    assert [r["step"] for r in rows] == [1, 2]


def test_dapo_dynamic_sampling_refills_zero_signal_groups(tokenizer, tmp_path):
    from jaxrl_reason.rewards.base import RewardResult

    def reward(texts, examples):
        # examples with an even index: every sample wrong (no signal); odd: alternate right/wrong
        s = [float(i % 2) if int(e.id.rsplit("-", 1)[1]) % 2 else 0.0 for i, e in enumerate(examples)]
        return RewardResult(np.array(s, np.float32), [{}] * len(s))

    model = tiny_model(tokenizer, seed=4)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=2, prompts_per_step=4, samples_per_prompt=4, max_new_tokens=8, lr=1e-3,
                        checkpoint_every=0, progress=False, dynamic_sampling=True, dynamic_sampling_max_rounds=6)
    tr = Trainer(model, tokenizer, GRPO("grpo"), train, reward, cfg, str(tmp_path))
    for m in tr.run():
        assert m["solve/zero_signal_frac"] == 0.0  # every trained group carries signal
        assert m["dynamic_sampling/filled_frac"] == 1.0
        assert m["dynamic_sampling/rounds"] >= 2  # half of each draw is dropped, so one round is never enough
        assert m["reward/mean"] == pytest.approx(0.5)
    tr.close()


@pytest.mark.slow
def test_code_config_end_to_end(tmp_path):
    """The code configs train through the same loop: code prompts, SFT on reference programs, sandboxed rewards."""
    from jaxrl_reason.configs.code_rlv import get_config as code_rlv
    from jaxrl_reason.experiment.config import read_run_config
    from jaxrl_reason.experiment.data import build_data
    from jaxrl_reason.experiment.pipeline import run

    cfg = code_rlv()
    cfg.workdir = str(tmp_path / "code")
    cfg.data.train_size, cfg.data.heldout_size = 200, 8
    cfg.model.hidden_size, cfg.model.num_hidden_layers, cfg.model.intermediate_size = 32, 2, 64
    cfg.tokenizer.vocab_size = 400
    cfg.sft.steps, cfg.sft.examples, cfg.sft.batch_size = 2, 50, 8
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.samples_per_prompt, cfg.rl.max_new_tokens = 1, 4, 2, 16
    cfg.rl.progress = False
    results = run(cfg)
    assert 0.0 <= results["after"]["accuracy"] <= 1.0
    rows = [json.loads(x) for x in open(os.path.join(cfg.workdir, "logs", "metrics.jsonl"))]
    assert rows[0]["verify/rows"] >= 0 and "loss/pg" in rows[0]
    # the reference programs the SFT saw really pass their tests in the sandbox
    task = build_data(read_run_config(cfg).data, cfg.seed)
    train, reward_fn, prompt_fn = task.train, task.reward_fn, task.prompt_fn
    res = reward_fn([e.solution for e in train[:8]], train[:8])
    assert float(np.mean(res.scores)) == 1.0
    assert "```python" in prompt_fn("Write f.")


class _TwoCallsGRPO(GRPO):
    """GRPO that, like CURE, asks the trainer for two more generations while building its batch."""

    def build(self, rollouts, ctx):
        prompts = [list(p) for p in rollouts.prompts]
        self.draws = [ctx.sample(prompts, num_samples=4, max_new_tokens=8).tokens for _ in range(2)]
        return super().build(rollouts, ctx)


def test_each_generation_in_a_step_gets_its_own_key(tokenizer, tmp_path):
    tr = make_trainer(tokenizer, str(tmp_path), steps=1)
    tr.method = _TwoCallsGRPO("grpo")
    tr.train_step()
    first, second = tr.method.draws
    # Same prompts, same policy, temperature 1: only a shared key would make the two calls draw the same tokens.
    assert first.shape == second.shape and (first != second).any()
    tr.close()


def mixed_solve_verify_batch():
    """Solve rows training on their completion and verify rows training on one token, as an RL^V step has."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 40, rng.integers(3, 12)).tolist() for _ in range(8)]
    completions = [rng.integers(5, 40, rng.integers(1, 7)).tolist() for _ in range(4)] + [[7]] * 4
    old = [(-3.0 + 0.1 * rng.normal(size=len(c))).tolist() for c in completions]
    solve = build_token_batch(prompts[:4], completions[:4], [1.0, -0.5, 0.25, 2.0], old[:4], "solve", length=24)
    verify = build_token_batch(prompts[4:], completions[4:], [0.0] * 4, None, "verify", length=24)
    return concat_batches([solve, verify])


@pytest.mark.parametrize("micro_batches,row_groups", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_head_at_trained_positions_only_is_the_same_update(tokenizer, micro_batches, row_groups):
    import optax

    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    batch = mixed_solve_verify_batch()
    scored = scored_size(batch, micro_batches, row_groups)
    per_group = batch.batch_size // (micro_batches * row_groups) * batch.length
    assert scored is not None and scored < per_group  # the head really runs on fewer positions
    terms = (pg_spec(("solve",), aggregation="seq_mean_token_mean"), sft_spec(("verify",), weight=0.5))
    opt = optax.sgd(1.0)
    update = make_update(graphdef, opt, terms, micro_batches=micro_batches, row_groups=row_groups)
    full = update(jax.tree.map(jnp.copy, params), opt.init(params), batch)
    part = update(jax.tree.map(jnp.copy, params), opt.init(params), batch, scored=scored)
    keys = [k for k in ("loss/pg", "loss/sft", "solve/entropy", "verify/nll", "grad_norm") if k in full.metrics]
    assert_same_update(part, full, params, keys, rtol=1e-5, atol=1e-6)
    # log-probs agree at every trained position, and are 0 where no loss reads them
    lp_full, _, _ = model_logprobs(graphdef, params, batch)
    lp_part, _, fits = model_logprobs(graphdef, params, batch, scored=scored_size(batch), row_groups=1)
    mask = batch.loss_mask != 0
    assert bool(fits)
    np.testing.assert_allclose(np.asarray(lp_part)[mask], np.asarray(lp_full)[mask], atol=1e-6)
    assert np.all(np.asarray(lp_part)[~mask] == 0)


def test_undersized_scored_is_refused_not_applied(tokenizer):
    import optax

    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    batch = mixed_solve_verify_batch()
    opt = optax.sgd(1.0)
    update = make_update(graphdef, opt, (pg_spec(("solve",)), sft_spec(("verify",))))
    out = update(jax.tree.map(jnp.copy, params), opt.init(params), batch, scored=2)
    assert not bool(out.finite["scored_positions"])
    for a, b in zip(jax.tree.leaves(out.params), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_scored_size_counts_the_fullest_group():
    batch = mixed_solve_verify_batch()
    trained = (batch.loss_mask != 0).sum(axis=1)
    assert scored_size(batch) == next(b for b in SCORED_BUCKETS if b >= trained.sum())
    # groups of 4 rows: the solve half holds every multi-token completion
    assert scored_size(batch, 1, 2) == next(b for b in SCORED_BUCKETS if b >= trained[:4].sum())
    assert scored_size(batch, 2, 2) == next(b for b in SCORED_BUCKETS if b >= max(trained[:2].sum(),
                                                                                  trained[2:4].sum()))
    dense = batch._replace(loss_mask=np.ones_like(batch.loss_mask))
    assert scored_size(dense) is None  # every position trained: the plain head
    with pytest.raises(ValueError, match="micro_batches x row_groups"):
        scored_size(batch, 3)


def test_update_matmul_kernels_option(tokenizer):
    """The CPU update compiles its matmuls to XLA's own dot kernels ("eigen", the default there) or to YNNPACK
    fusions ("ynn"); both compute the same update."""
    import optax

    from jaxrl_reason.train.update import training_compiler_options

    with pytest.raises(ValueError, match="matmuls"):
        training_compiler_options("fast")
    assert training_compiler_options("ynn") == {}
    assert training_compiler_options("auto") == training_compiler_options("eigen") != {}  # tests run on CPU
    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    batch = small_batch([1.0, -0.5, 0.25, 2.0])
    opt = optax.sgd(1.0)
    outs, kernels = [], []
    for matmuls in ("eigen", "ynn"):
        update = make_update(graphdef, opt, (pg_spec(("solve",)),), matmuls=matmuls)
        hlo = update.lower(params, opt.init(params), batch).compile().as_text()
        kernels.append("ynn_fusion" in hlo)
        outs.append(update(jax.tree.map(jnp.copy, params), opt.init(params), batch))
    assert kernels == [False, True]
    np.testing.assert_allclose(float(outs[0].metrics["grad_norm"]), float(outs[1].metrics["grad_norm"]), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(outs[0].params), jax.tree.leaves(outs[1].params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_reference_logprobs_at_trained_positions_only(tokenizer):
    """The KL reference forward with the LM head only where the loss reads it: the same log-probs there, 0
    elsewhere, and NaN (refused by the update as a non-finite KL) when `scored` is too small."""

    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    batch = mixed_solve_verify_batch()
    scored = scored_size(batch)
    assert scored is not None
    full = np.asarray(reference_logprobs(graphdef, params, batch))
    part = np.asarray(reference_logprobs(graphdef, params, batch, scored=scored))
    mask = batch.loss_mask != 0
    np.testing.assert_allclose(part[mask], full[mask], atol=1e-6)
    assert np.all(part[~mask] == 0) and np.any(full[~mask] != 0)
    assert np.isnan(np.asarray(reference_logprobs(graphdef, params, batch, scored=2))).all()


def _answer_span(weight):
    """Span weights: the final answer inside \\boxed{...} of an arithmetic worked solution weighs `weight`."""
    def spans(e):
        start = e.solution.rindex("\\boxed{") + len("\\boxed{")
        return [(start, e.solution.index("}", start), weight)]
    return spans


def test_sft_span_weights_weigh_the_loss_and_move_the_weighted_tokens_more(tokenizer):
    """`sft_rows(span_weights=)`: the tokens of a span carry its weight in loss_mask (eos and the rest 1), the SFT
    loss and its nll metric are the weighted token mean, and an SGD step raises the weighted tokens' log-prob more
    than the same step without weights does. Bad spans are refused."""
    import optax

    from jaxrl_reason.train.trainer import span_token_weights, sft_rows

    examples = arithmetic_examples(4, seed=5, config=ARITH)
    plain = sft_rows(tokenizer, examples)
    weighted = sft_rows(tokenizer, examples, span_weights=_answer_span(6.0))
    np.testing.assert_array_equal(plain.tokens, weighted.tokens)
    assert set(np.unique(plain.loss_mask)) == {0.0, 1.0}
    heavy = weighted.loss_mask == 6.0
    assert np.array_equal(weighted.loss_mask != 0, plain.loss_mask != 0) and heavy.any()
    for row, e in zip(range(len(examples)), examples):
        answer = e.solution[e.solution.rindex("{") + 1:e.solution.rindex("}")]
        # loss_mask sits on the target token's own slot (the shift convention): decode those tokens
        assert tokenizer.decode(weighted.tokens[row][heavy[row]]) == answer
        assert weighted.loss_mask[row][np.nonzero(weighted.loss_mask[row])[0][-1]] == 1.0  # eos untouched

    model = tiny_model(tokenizer, max_positions=1024)
    graphdef, params = nnx.split(model)
    opt = optax.sgd(0.5)
    update = make_update(graphdef, opt, (sft_spec(("solve",), name="sft"),))
    lp = np.asarray(model_logprobs(graphdef, params, weighted)[0])
    w = np.asarray(weighted.loss_mask)
    out = update(jax.tree.map(jnp.copy, params), opt.init(params), weighted)
    np.testing.assert_allclose(float(out.metrics["loss/sft"]), -(lp * w).sum() / w.sum(), rtol=1e-4)
    np.testing.assert_allclose(float(out.metrics["solve/nll"]), -(lp * w).sum() / w.sum(), rtol=1e-4)
    ref = update(jax.tree.map(jnp.copy, params), opt.init(params), plain)
    gain_w = (np.asarray(model_logprobs(graphdef, out.params, weighted)[0]) - lp)[heavy].mean()
    gain_p = (np.asarray(model_logprobs(graphdef, ref.params, plain)[0]) - lp)[heavy].mean()
    assert gain_w > gain_p > 0

    assert span_token_weights([(0, 2), (2, 3), (3, 5)], [(1, 3, 2.0)]) == [2.0, 2.0, 1.0]
    for bad in ((3, 3, 2.0), (0, 2, -1.0), (0, 2, float("nan"))):
        with pytest.raises(ValueError, match="span weight"):
            span_token_weights([(0, 2)], [bad])
    with pytest.raises(ValueError, match="past its"):
        sft_rows(tokenizer, examples[:1], span_weights=lambda e: [(0, len(e.solution) + 1, 2.0)])


def test_sft_stopped_midway_resumes_from_its_checkpoint_to_the_same_model(tokenizer, tmp_path):
    """sft_train(checkpoint_dir=): a warm-up cut after 3 of 7 steps and started again trains the same batches on
    the same schedule, so it ends at the uninterrupted run's params and metrics; a finished one trains nothing."""
    from jaxrl_reason.train.trainer import sft_train

    rows = arithmetic_examples(24, seed=3)
    kw = dict(steps=7, batch_size=4, lr=3e-3, warmup_steps=2, seed=1, progress=False)
    straight = tiny_model(tokenizer)
    hist = sft_train(straight, tokenizer, rows, **kw)
    cut = tiny_model(tokenizer)
    ck = str(tmp_path / "sft")
    log = MetricsWriter(str(tmp_path / "logs"), tensorboard=False)
    kw_log = dict(writer=log, log_offset=10, checkpoint_dir=ck, checkpoint_every=2)
    first = sft_train(cut, tokenizer, rows, stop_after=3, **kw_log, **kw)
    assert len(first) == 3
    # another init, and too few steps left to reach step 7 from scratch: only the restored state ends right
    resumed = tiny_model(tokenizer, seed=5)
    rest = sft_train(resumed, tokenizer, rows, stop_after=5, **kw_log, **kw)
    log.close()
    # the save at step 2 is the one resumed from: step 3 is trained again, then 4..7
    assert [m["sft/nll"] for m in rest] == pytest.approx([m["sft/nll"] for m in hist], rel=1e-5)
    # step 3, logged before the cut and trained again, is in the log once
    logged = read_metrics(str(tmp_path / "logs"))
    assert [r["step"] for r in logged] == list(range(11, 18))
    assert [r["sft/nll"] for r in logged] == pytest.approx([m["sft/nll"] for m in hist], rel=1e-5)
    for a, b in zip(jax.tree.leaves(nnx.state(resumed)), jax.tree.leaves(nnx.state(straight))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    again = tiny_model(tokenizer, seed=6)
    assert sft_train(again, tokenizer, rows, checkpoint_dir=ck, **kw) == rest  # done: restored, nothing trained
    for a, b in zip(jax.tree.leaves(nnx.state(again)), jax.tree.leaves(nnx.state(resumed))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="saved with steps=7, this run has steps=9"):
        sft_train(tiny_model(tokenizer), tokenizer, rows, checkpoint_dir=ck, **{**kw, "steps": 9})
    with pytest.raises(ValueError, match="does not match these rows.*Delete that directory"):
        sft_train(tiny_model(tokenizer), tokenizer, rows[:20], checkpoint_dir=ck, **kw)
    with pytest.raises(ValueError, match="SFT checkpoint_every=0 must be >= 1"):
        sft_train(tiny_model(tokenizer), tokenizer, rows, checkpoint_dir=ck, checkpoint_every=0, **kw)


def test_packed_rows_are_the_same_sft_update_on_fewer_rows(tokenizer):
    """rl.batch.pack_rows (sft.pack): long and short sequences share rows as segments; every sequence keeps its
    tokens, positions and targets, and the token-mean SFT update is the unpacked one."""
    import optax

    from jaxrl_reason.rl.batch import pack_rows, pad_rows_to

    rng = np.random.default_rng(0)
    prompts = [rng.integers(5, 30, n).tolist() for n in (9, 3, 4, 12, 2, 5)]
    targets = [rng.integers(5, 30, n).tolist() for n in (6, 2, 3, 9, 2, 4)]
    batch = build_token_batch(prompts, targets, [0.0] * 6, None, "solve", length=24)
    packed = pack_rows(batch)
    assert packed.tokens.shape == (3, 24)  # sequences of 21 | 15 + 9 | 7 + 5 + 4 tokens in rows of 24
    seen = []
    for r in range(packed.batch_size):
        for k in range(1, int(packed.segment_ids[r].max()) + 1):
            at = packed.segment_ids[r] == k
            seq = packed.tokens[r][at].tolist()
            i = next(i for i in range(6) if seq == prompts[i] + targets[i])
            seen.append(i)
            np.testing.assert_array_equal(packed.positions[r][at], np.arange(at.sum()))
            np.testing.assert_array_equal(packed.loss_mask[r][at], batch.loss_mask[i][:at.sum()])
    assert sorted(seen) == list(range(6))
    with pytest.raises(ValueError, match="does not fit length=8"):
        pack_rows(batch, 8)
    with pytest.raises(ValueError, match="one sequence from its first position"):
        pack_rows(packed)

    model = tiny_model(tokenizer)
    graphdef, params = nnx.split(model)
    opt = optax.sgd(1.0)  # the update is the gradient itself
    update = make_update(graphdef, opt, (sft_spec(("solve",), name="sft", aggregation="token_mean"),))
    ref = update(jax.tree.map(jnp.copy, params), opt.init(params), batch)
    out = update(jax.tree.map(jnp.copy, params), opt.init(params), pad_rows_to(packed, 4, bucket=True))
    assert_same_update(out, ref, params, ("loss/sft", "grad_norm"), rtol=1e-5, atol=1e-6)


def test_a_kl_run_over_micro_batches_scores_its_reference_per_micro_batch(tokenizer, tmp_path):
    """The reference forward takes the update's `scored`, sized for one micro-batch's row group: scoring the whole
    batch with it overflowed (NaN KL, every step refused) as soon as micro_batches > 1. It now scores one
    micro-batch at a time, in the update's layout: the same KL as one micro-batch."""
    runs = {mb: make_trainer(tokenizer, str(tmp_path / f"mb{mb}"), steps=2, reward=length_parity_reward,
                             micro_batches=mb).run() for mb in (1, 4)}
    for a, b in zip(runs[1], runs[4]):
        assert np.isfinite(b["loss/kl"]) and abs(a["solve/kl_ref"] - b["solve/kl_ref"]) < 1e-5
    assert runs[4][-1]["solve/kl_ref"] > 0
