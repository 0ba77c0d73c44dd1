"""The union `self_check` (docs/methods/union.md): every subset of its parts builds the rows and terms of that
subset and samples nothing for a part at weight 0; its classes in another order give the same batch; every part's
metrics are present and no part writes over another's; its default loss is the stated one (CURE's paper loss);
and a kill-and-resume through the trainer reproduces it bit for bit, CIPO's rho included."""
import itertools
import os

import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.configs import PRESET_DIR, load_config_file
from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.data.prompts import (correction_prompt, critique_prompt, guided_prompt, solve_prompt,
                                       verify_prompt)
from jaxrl_reason.methods import METHODS, make_method
from jaxrl_reason.methods.base import Context
from jaxrl_reason.methods.cipo import CIPO
from jaxrl_reason.methods.cure import CURE, PAPER_LOSS
from jaxrl_reason.methods.grpo import GRPO
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.methods.self_check import SelfCheck
from jaxrl_reason.rl.batch import TASKS
from jaxrl_reason.train.trainer import Trainer, TrainerConfig

from tiny import (ARITH, padded_samples, parity_reward, right_reward as reward, scripted_rollouts,  # noqa: E402
                  tiny_model)

HINT = "add the numbers one pair at a time and check every partial sum twice before writing it"
# Q=4 x K=4: zero-pass, acc 0.25, acc 0.75, solved: every part has sources (wrong and right samples).
REWARDS = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], np.float32)
SMALL = dict(guided_samples=2, critique_batch_size=4, critique_max_new_tokens=32, correction_samples=2,
             measure_verifier=True)
PART_WEIGHTS = {"verify": ("verify_weight",), "critique": ("critique_weight", "guided_weight"),
                "correct": ("correct_weight",)}
PART_TASKS = {"verify": {"verify"}, "critique": {"critique", "guided_solve"}, "correct": {"correct"}}
PART_TERMS = {"verify": {"verify"}, "critique": {"critique", "guided_solve"}, "correct": {"correct"}}
KIND_OF_PART = {"critique": {"critique", "guided"}, "correct": {"correction"}, "verify": set()}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    ex = arithmetic_examples(30, seed=1, config=ARITH)
    texts = [solve_prompt(e.question) for e in ex] + [e.solution for e in ex]
    texts += [critique_prompt(e.question, e.solution) for e in ex] + [guided_prompt(e.question, HINT) for e in ex]
    texts += [correction_prompt(e.question, e.solution) for e in ex] + [verify_prompt(e.question, e.solution)
                                                                        for e in ex]
    texts += [f"ERROR_FOUND: true\nERROR_QUOTE: x\nWHY_IT_MATTERS: y\nHIGH_LEVEL_HINT: {HINT}"] * 5
    return train_tiny_tokenizer(texts, str(tmp_path_factory.mktemp("tok")), vocab_size=640)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer, seed=3, max_positions=1024)


def kind_of(prompt_text: str) -> str:
    if "Find the earliest error" in prompt_text:
        return "critique"
    if "Guidance for solving" in prompt_text:
        return "guided"
    if "Here is an earlier attempt" in prompt_text:
        return "correction"
    raise AssertionError(f"unexpected prompt: {prompt_text[:80]!r}")


class StreamSampler:
    """A stochastic stand-in for one sampler stream: a critique names HINT; a guided solution or a correction is
    right or wrong at random from the stream's own generator, seeded by the stream's name. Every call is logged
    (kind, stream) in `log`, shared by the streams of one build."""

    def __init__(self, tok, stream: str, log: list):
        self.tok, self.stream, self.log = tok, stream, log
        self.rng = np.random.default_rng(sum(map(ord, stream)))

    def __call__(self, prompts, num_samples=1, max_new_tokens=64, **kw):
        texts = [self.tok.decode(p) for p in prompts]
        self.log += [(kind_of(t), self.stream) for t in texts]
        rows = []
        for t in texts:
            for _ in range(num_samples):
                kind, ok = kind_of(t), bool(self.rng.integers(2))
                out = (f"ERROR_QUOTE: 3 + 4 = 8\nWHY_IT_MATTERS: the sum is off\nHIGH_LEVEL_HINT: {HINT}"
                       if kind == "critique" else f"{kind} {'RIGHT' if ok else 'WRONG'}")
                rows.append(self.tok.encode(out)[:max_new_tokens - 1] + [self.tok.eos_id])
        return padded_samples(rows, len(prompts), num_samples, lambda n: -0.25 - 0.01 * np.arange(n))


def make_rollouts(tok):
    q, k = REWARDS.shape
    return scripted_rollouts(tok, REWARDS, [f"attempt q{i // k}s{i % k} " + ("RIGHT" if REWARDS.reshape(-1)[i] else
                                                                            "WRONG") for i in range(q * k)])


def build(method, tok, model, seed=0):
    """One build on the scripted step: (batch, metrics, log of (prompt kind, stream) per sampled prompt)."""
    log: list = []
    ctx = Context(tok, StreamSampler(tok, "main", log), reward, np.random.default_rng(seed), tok.pad_id, model,
                  nnx.state(model), streams=lambda part: StreamSampler(tok, part, log))
    batch, metrics = method.build(make_rollouts(tok), ctx)
    return batch, metrics, log


def union(on=("verify", "critique", "correct"), cls=SelfCheck, **knobs):
    weights = {w: (1.0 if p in on else 0.0) for p, ws in PART_WEIGHTS.items() for w in ws}
    return cls(**{**SMALL, **weights, **knobs})


def tasks_of(batch) -> set:
    names = {v: k for k, v in TASKS.items()}
    return {names[int(t)] for t in np.unique(np.asarray(batch.task_id))}


SUBSETS = [s for n in range(4) for s in itertools.combinations(("verify", "critique", "correct"), n)]


@pytest.mark.parametrize("on", SUBSETS, ids=lambda s: "+".join(s) or "none")
def test_every_subset_builds_its_rows_and_terms_and_samples_nothing_for_a_part_at_weight_zero(on, tokenizer,
                                                                                              model):
    batch, metrics, log = build(union(on), tokenizer, model)
    assert tasks_of(batch) == {"solve"}.union(*(PART_TASKS[p] for p in on))
    assert {t.name for t in union(on).terms()} == {"pg"}.union(*(PART_TERMS[p] for p in on))
    # Sampled prompts by kind: a part at weight 0 sampled none, a part that is on sampled from its own stream.
    assert {k for k, _ in log} == set().union(*(KIND_OF_PART[p] for p in on))
    assert all(stream == ("critique" if k in ("critique", "guided") else "correct") for k, stream in log)
    assert ("cipo/rho" in metrics) == ("correct" in on) and ("verify/rows" in metrics) == ("verify" in on)
    assert ("critique/rows" in metrics) == ("critique" in on)
    if not on:  # every part off: GRPO's rows, under the union's loss
        ref, ref_metrics, _ = build(GRPO(loss=PAPER_LOSS), tokenizer, model)
        for a, b in zip(batch, ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        # and GRPO's metrics, beside the verifier measured (measure_verifier) though no verify row is trained
        measured = {k for k in metrics if k.startswith("verify/")}
        assert measured == {"verify/acc_positive", "verify/acc_negative", "verify/balanced_acc"}
        assert {k: v for k, v in metrics.items() if k not in measured} == ref_metrics


def test_one_weight_of_cure_at_zero_samples_its_critiques_but_trains_only_the_other_task(tokenizer, model):
    for off, kept in (("critique_weight", "guided_solve"), ("guided_weight", "critique")):
        method = union(**{off: 0.0})
        batch, _, log = build(method, tokenizer, model)
        assert {"critique", "guided"} <= {k for k, _ in log}  # hints and critique rewards still need both
        assert tasks_of(batch) & {"critique", "guided_solve"} == {kept}
        assert {t.name for t in method.terms()} & {"critique", "guided_solve"} == {kept}


class Reordered(RLV, CURE, CIPO):
    name = "self_check_reordered"
    tasks = SelfCheck.tasks
    default_loss = PAPER_LOSS


class Reordered2(CURE, CIPO, RLV):
    name = "self_check_reordered2"
    tasks = SelfCheck.tasks
    default_loss = PAPER_LOSS


@pytest.mark.parametrize("cls", [Reordered, Reordered2])
def test_another_class_order_gives_the_same_batch_metrics_and_terms(cls, tokenizer, model):
    a, ma, _ = build(union(), tokenizer, model, seed=4)
    b, mb, _ = build(union(cls=cls), tokenizer, model, seed=4)
    assert {"solve", "verify", "critique", "guided_solve", "correct"} == tasks_of(a)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ma == mb
    assert sorted(map(repr, union().terms())) == sorted(map(repr, union(cls=cls).terms()))
    c, _, _ = build(union(), tokenizer, model, seed=5)  # and the step's seed does reach the parts
    assert any(np.asarray(x).shape != np.asarray(y).shape or not np.array_equal(x, y) for x, y in zip(a, c))


def test_every_part_logs_its_metrics_and_none_writes_over_another(tokenizer, model):
    grpo_keys = set(build(GRPO(loss=PAPER_LOSS), tokenizer, model)[1])
    singles = {"verify": RLV(verify_weight=1.0, measure_verifier=True),
               "critique": CURE(**{k: v for k, v in SMALL.items() if k in ("guided_samples", "critique_batch_size",
                                                                             "critique_max_new_tokens")}),
               "correct": CIPO(correction_samples=2)}
    own = {p: set(build(m, tokenizer, model)[1]) - grpo_keys for p, m in singles.items()}
    for p, q in itertools.combinations(own, 2):
        assert own[p] & own[q] <= {"generate/extra_tokens"}, (p, q, own[p] & own[q])
    _, metrics, _ = build(union(), tokenizer, model)
    for p, keys in own.items():
        assert keys <= set(metrics), (p, keys - set(metrics))
    # The total spent beyond the rollouts is the parts' sum, each part's share under its own name.
    assert metrics["cure/extra_tokens"] > 0 and metrics["cipo/extra_tokens"] > 0
    assert metrics["generate/extra_tokens"] == metrics["cure/extra_tokens"] + metrics["cipo/extra_tokens"]


def test_the_default_loss_is_cures_paper_loss_whatever_the_class_order():
    assert METHODS["self_check"] is SelfCheck
    assert make_method({"name": "self_check"}).loss == PAPER_LOSS
    assert make_method({"name": "self_check", "beta": 0.01}).loss.eps_high == PAPER_LOSS.eps_high
    # Without the statement the MRO would pick it: CIPO and RL^V define none, so the first base that does.
    assert SelfCheck.default_loss is PAPER_LOSS and CIPO.default_loss is GRPO.default_loss != PAPER_LOSS


@pytest.mark.parametrize("name", ["testbed_latin_self_check.py", "self_check_qwen25_7b.py"])
def test_presets_validate_and_build_the_union(name):
    cfg = load_config_file(os.path.join(PRESET_DIR, name))
    m = make_method(cfg.method)
    assert isinstance(m, SelfCheck) and m.parts() == ("correct", "verify", "critique")
    assert m.verify_weight > 0 and m.critique_weight > 0 and m.guided_weight > 0 and m.correct_weight > 0


# ------------------------------------------------------------------------------------------ trainer


def make_trainer(tokenizer, workdir, steps=3):
    model = tiny_model(tokenizer, seed=3, max_positions=1024)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=steps, prompts_per_step=2, samples_per_prompt=4, max_new_tokens=8, lr=1e-3,
                        checkpoint_every=1, progress=False, seed=11)
    # a large rho_step and a band of one point (0.6: a retention of 1/2 moves rho up, 1 down) so that rho moves
    # at every step with a successful source on a random model
    method = SelfCheck(guided_samples=2, critique_batch_size=4, critique_max_new_tokens=8, guided_max_new_tokens=8,
                       correction_samples=2, correction_max_new_tokens=8, rho_step=0.2, tau_low=0.6,
                       tau_high=0.6, measure_verifier=False)
    return Trainer(model, tokenizer, method, train, parity_reward, cfg, workdir)


@pytest.mark.slow  # three trainers (full, killed, resumed) of the five-task union on 2 shared cores
def test_kill_and_resume_of_the_union_is_bit_exact_rho_included(tokenizer, tmp_path):
    full = make_trainer(tokenizer, str(tmp_path / "a"))
    ref = full.run()
    ref_state = full.method.state_dict()
    full.close()
    for k in ("loss/pg", "loss/verify", "loss/critique", "loss/guided_solve", "loss/correct", "cipo/rho",
              "critique/rows", "verify/rows", "correct/rows"):
        assert all(k in r for r in ref), k
    assert len({r["cipo/rho"] for r in ref} | {ref[-1]["cipo/rho_next"]}) > 1  # rho moved
    part = make_trainer(tokenizer, str(tmp_path / "b"))
    first = part.run(stop_after=1)
    part.close()
    resumed = make_trainer(tokenizer, str(tmp_path / "b"))
    assert resumed.method.state_dict() == part.method.state_dict()
    rest = resumed.run()
    resumed.close()
    keys = [k for k in ref[0] if k.startswith(("loss/", "cipo/", "critique/", "verify/", "correct/", "solve/"))]
    for k in keys:
        assert [r.get(k) for r in ref] == [r.get(k) for r in first + rest], k
    assert resumed.method.state_dict() == ref_state
