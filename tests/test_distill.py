"""On-policy distillation (`methods.distill`): the teacher's signal on the policy's own samples, its place in the
advantages, loading a teacher from a checkpoint, and -- on tiny models -- that training on it lowers the exact
reverse KL to the teacher."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxrl_reason.methods import make_method, read_method_config
from jaxrl_reason.methods.distill import DistillConfig, Distilled, load_teacher, teacher_signal
from jaxrl_reason.rl import losses as L
from jaxrl_reason.rl.batch import build_token_batch
from jaxrl_reason.rl.scoring import completion_logprobs, next_token_logprobs
from jaxrl_reason.sampling.sampler import sample
from tests.tiny import arith_tokenizer, tiny_model

PROMPTS = [[5, 9, 12], [7, 3], [11, 4, 6, 8], [20, 21]]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tok = arith_tokenizer(tmp_path_factory.mktemp("tok"))
    # The teacher: the student's own network made 4x more peaked (its final norm scaled), so the reverse KL is large
    # and the direction that lowers it is well defined.
    teacher = tiny_model(tok, seed=0)
    teacher.norm.weight[...] = teacher.norm.weight[...] * 4.0
    return tok, tiny_model(tok, seed=0), teacher


def _samples(student, key, n=8, temperature=1.0, max_new_tokens=6):
    out = sample(student, PROMPTS, key, max_new_tokens=max_new_tokens, num_samples=n, temperature=temperature)
    comps = out.completions()
    prompts = [PROMPTS[i] for i in out.prompt_index]
    lps = [np.asarray(out.logprobs[i, :len(c)], np.float32) for i, c in enumerate(comps)]
    return prompts, comps, lps


def test_signal_is_teacher_minus_sampler_logprob(models):
    tok, student, teacher = models
    prompts, comps, lps = _samples(student, jax.random.key(0), n=2, temperature=0.7)
    adv = [0.5] * len(comps)
    batch = build_token_batch(prompts, comps, adv, lps, "solve")
    d = teacher_signal(batch, teacher, [0], temperature=0.7, rows_per_call=3)  # rows split into calls of 3
    want = completion_logprobs(teacher, None, prompts, comps, temperature=0.7)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        np.testing.assert_allclose(d[i, len(p):len(p) + len(c)], want[i] - lps[i], rtol=1e-5, atol=1e-5)
    assert np.all(d[batch.loss_mask == 0] == 0.0)
    # the student as its own teacher: no signal (its sampler log-probs are its own tempered log-probs)
    same = teacher_signal(batch, student, [0], temperature=0.7)
    assert np.abs(same).max() < 2e-4


class _Fixed:
    name, tasks, uses_zero_signal_groups = "fixed", ("solve",), False

    def __init__(self, batch):
        self.batch = batch

    def terms(self):
        return (L.pg_spec(),)

    def build(self, rollouts, ctx):
        return self.batch, {"own": 1.0}

    def state_dict(self):
        return {}


def test_distilled_folds_signal_into_advantages(models):
    tok, student, teacher = models
    prompts, comps, lps = _samples(student, jax.random.key(1), n=2)
    batch = build_token_batch(prompts, comps, [1.0, -1.0] * (len(comps) // 2), lps, "solve")
    d = teacher_signal(batch, teacher, [0])
    ctx = type("Ctx", (), {"model": student, "temperature": 1.0})()
    for rl_coef, coef in ((1.0, 1.0), (0.0, 0.5), (2.0, 0.0)):
        m = Distilled(_Fixed(batch), DistillConfig(teacher="unused", coef=coef, rl_coef=rl_coef), teacher=teacher)
        out, metrics = m.build(None, ctx)
        np.testing.assert_allclose(out.advantages, rl_coef * batch.advantages + coef * d, rtol=1e-6, atol=1e-6)
        assert metrics["own"] == 1.0 and metrics["distill/reverse_kl"] == pytest.approx(-d[batch.loss_mask > 0].mean(),
                                                                                          rel=1e-5)
        assert m.terms() == (L.pg_spec(),) and m.tasks == ("solve",) and m.name == "fixed+distill"


def test_config_section_and_teacher_checkpoint(models, tmp_path):
    from jaxrl_reason.knobs import UnknownKnobError
    from jaxrl_reason.models.hf_port import save_pretrained

    tok, student, teacher = models
    assert type(make_method({"name": "grpo"})).__name__ == "GRPO"  # off by default: the method itself
    save_pretrained(teacher, str(tmp_path / "teacher"))
    m = make_method({"name": "rlv", "policy_loss": "cispo", "distill": {"teacher": str(tmp_path / "teacher"),
                                                                        "coef": 0.5}})
    assert isinstance(m, Distilled) and m.config.coef == 0.5 and {t.kind for t in m.terms()} >= {"cispo", "sft"}
    loaded = m.teacher  # loaded on first use, from the HF directory
    x = jnp.asarray([[3, 4, 5, 6]])
    pos = jnp.arange(4)[None]
    np.testing.assert_allclose(loaded(x, pos), teacher(x, pos), rtol=1e-5, atol=1e-5)
    assert load_teacher(teacher) is teacher  # an in-memory model as it is
    assert isinstance(make_method({"name": "grpo"}, teacher=teacher), Distilled)
    with pytest.raises(UnknownKnobError, match=r"method.distill.coeff"):
        read_method_config({"distill": {"coeff": 1.0}})
    with pytest.raises(ValueError, match="unknown task"):
        make_method({"name": "grpo", "distill": {"teacher": "x", "tasks": "solv"}})


def _reverse_kl(student_params, gd, teacher, prompts, comps):
    """Exact per-token KL(pi || pi_T) over the whole vocabulary, averaged over the completion tokens."""
    b = build_token_batch(prompts, comps, [0.0] * len(comps), None, "solve")
    pos = jnp.asarray(b.positions)
    ls = jax.nn.log_softmax(nnx.merge(gd, student_params)(jnp.asarray(b.tokens), pos), -1)
    lt = jax.nn.log_softmax(teacher(jnp.asarray(b.tokens), pos), -1)
    kl = jnp.sum(jnp.exp(ls) * (ls - lt), -1)[:, :-1]  # predicting token t+1 (the TokenBatch shift)
    m = jnp.asarray(b.loss_mask)[:, 1:]
    return float(jnp.sum(kl * m) / jnp.sum(m))


@pytest.mark.slow  # 22 s a call on 2 shared cores (2026-12-07)
def test_training_on_the_signal_lowers_the_reverse_kl(models):
    tok, student, teacher = models
    student = nnx.merge(*nnx.split(student))  # a copy: the fixture's student stays as it is
    gd, params = nnx.split(student)
    terms = (L.pg_spec(aggregation="token_mean"),)
    tx = optax.adam(3e-3)
    opt = tx.init(params)

    @jax.jit
    def step(params, opt, batch):
        def loss(p):
            lp = next_token_logprobs(nnx.merge(gd, p)(batch.tokens, batch.positions, batch.segment_ids), batch.tokens)
            return L.objective(lp, batch, terms)[0]

        g = jax.grad(loss)(params)
        u, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, u), opt

    kw = dict(n=64, max_new_tokens=2)  # 256 samples a step: the signal is a sampled estimate
    probe = _samples(student, jax.random.key(99), **kw)
    before = _reverse_kl(params, gd, teacher, probe[0], probe[1])
    for i in range(15):
        nnx.update(student, params)
        prompts, comps, lps = _samples(student, jax.random.key(i), **kw)
        batch = build_token_batch(prompts, comps, [0.0] * len(comps), lps, "solve", length=8)
        batch = batch._replace(advantages=teacher_signal(batch, teacher, [0]))
        params, opt = step(params, opt, jax.tree.map(jnp.asarray, batch))
    nnx.update(student, params)
    probe = _samples(student, jax.random.key(99), **kw)
    after = _reverse_kl(params, gd, teacher, probe[0], probe[1])
    assert after < 0.8 * before, (before, after)  # measured: 0.072 -> 0.046


def test_gguf_teacher_from_config(tmp_path):
    """A GGUF file as the teacher: `method.distill.teacher=<file>.gguf` loads the model the file was written from."""
    pytest.importorskip("gguf", reason="pip install gguf (llama.cpp's reader) for the GGUF import")
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from gguf_fixtures import write_gguf_from_hf
    from hf_fixtures import make_hf_model, torch_logits

    hf = make_hf_model("qwen2")
    path = write_gguf_from_hf(tmp_path / "teacher.gguf", hf, "qwen2")
    m = make_method({"name": "grpo", "distill": {"teacher": str(path)}})
    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (1, 12))
    ours = np.asarray(m.teacher(jnp.asarray(tokens), jnp.arange(12)[None]))
    np.testing.assert_allclose(ours, torch_logits(hf, tokens), atol=1e-4)
