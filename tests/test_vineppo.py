"""VinePPO's pure core: step splitting and Monte-Carlo step advantages (jaxrl_reason/methods/vineppo.py)."""
import numpy as np
import pytest

from jaxrl_reason.methods.vineppo import step_advantages, step_boundaries

NL = 9  # the newline token id in these hand-made completions


def test_step_splitting_tricky_cases():
    # "a b \n c \n" : trailing newline is the end, not a boundary.
    assert step_boundaries([1, 2, NL, 3, NL], [NL], max_steps=8) == [3]
    # No trailing newline.
    assert step_boundaries([1, NL, 2, NL, 3], [NL], max_steps=8) == [2, 4]
    # Empty steps ("\n\n\n") collapse into one boundary after the run.
    assert step_boundaries([1, NL, NL, NL, 2], [NL], max_steps=8) == [4]
    # A leading newline run is a boundary too (the step before it is just the newlines).
    assert step_boundaries([NL, 1, 2], [NL], max_steps=8) == [1]
    # Cap: 5 boundaries, max_steps=3 keeps 2, evenly spaced (first and last).
    comp = [1, NL] * 5 + [2]
    assert step_boundaries(comp, [NL], max_steps=3) == [2, 10]
    assert step_boundaries(comp, [NL], max_steps=1) == []
    with pytest.raises(ValueError, match="max_steps"):
        step_boundaries(comp, [NL], max_steps=0)


def test_early_step_that_makes_success_likely_gets_positive_advantage():
    # V(s_0) = 0.25 from the prompt; after step 1 success is likely (0.75); after step 2 the reward is 1.
    adv = step_advantages(6, [2, 4], [0.25, 0.75, 1.0], reward=1.0)
    np.testing.assert_allclose(adv, [0.5, 0.5, 0.25, 0.25, 0.0, 0.0])
    assert (adv[:2] > 0).all()
    # A step that ruins a likely success gets a negative advantage.
    bad = step_advantages(4, [2], [0.8, 0.1], reward=0.0)
    np.testing.assert_allclose(bad, [-0.7, -0.7, -0.1, -0.1], atol=1e-6)
    with pytest.raises(ValueError, match="values"):
        step_advantages(4, [2], [0.8], reward=0.0)


# ---------------------------------------------------------------------------------------------- the method

class _Tok:
    """Four-token vocabulary: a, newline, b, c."""
    vocab_size = 4
    pad_id = 0

    def decode(self, ids, skip_special_tokens=False):
        return "".join("a\nbc"[int(i)] for i in ids)


class _Out:
    def __init__(self, rows):
        self.rows = rows

    def completions(self):
        return self.rows


def _reward(texts, examples):
    from jaxrl_reason.rewards.base import RewardResult
    return RewardResult(np.array([t.endswith("c") for t in texts], np.float32), [{} for _ in texts])


def test_mc_values_and_advantages_by_hand():
    """One question, G = 2. Row 0 "a\\nb\\nc" (reward 1) has boundaries after each newline (2, 4); row 1 "aa"
    (reward 0) has none. From boundary 2 half the K = 2 continuations end in "c", from 4 both: V = [0.5 (the
    group's mean), 0.5, 1.0]. So row 0's step 2 tokens get +0.5, the rest of row 0 0, and row 1 0 - 0.5."""
    from jaxrl_reason.methods.base import Context, Rollouts
    from jaxrl_reason.methods.vineppo import VinePPO

    calls = []

    def sample(prefixes, num_samples, max_new_tokens):
        calls.append((prefixes, num_samples, max_new_tokens))
        cont = {2: [[3], [0]], 4: [[3], [3]]}
        return _Out([c for p in prefixes for c in cont[len(p) - 1]])

    comps = [[0, 1, 2, 1, 3], [0, 0]]
    ro = Rollouts(["q"], [[0]], comps, [np.zeros(len(c), np.float32) for c in comps], ["a\nb\nc", "aa"],
                  np.array([[1.0, 0.0]], np.float32), ["eos", "eos"], [{}, {}])
    ctx = Context(_Tok(), sample, _reward, np.random.default_rng(0), 0, max_new_tokens=8)
    m = VinePPO(vine_samples=2, max_steps=8)
    bounds, vals, cost = m.values(ro, ctx)
    assert bounds == [[2, 4], []] and vals == [[0.5, 0.5, 1.0], [0.5]]
    assert len(calls) == 1 and calls[0][1] == 2 and calls[0][2] == 8 - 2  # one batched call over both boundaries
    assert cost["vine/extra_tokens"] == 4 and cost["vine/boundaries_per_seq"] == 1.0
    batch, metrics = m.build(ro, ctx)
    adv = np.asarray(batch.advantages)[np.asarray(batch.loss_mask) > 0]
    assert sorted(adv.tolist()) == [-0.5, -0.5, 0.0, 0.0, 0.0, 0.5, 0.5]


def test_vine_prompts_per_call_reaches_the_sampler_and_is_refused_below_zero():
    """vine_prompts_per_call caps the states sampled together (`sample(prompts_per_call=...)`, which returns one
    call's samples); 0 leaves the call as it was (no keyword: any sampler works)."""
    from jaxrl_reason.methods.base import Context, Rollouts
    from jaxrl_reason.methods.vineppo import VinePPO

    seen = []

    def sample(prefixes, num_samples, max_new_tokens, **kw):
        seen.append(kw)
        return _Out([[3] for p in prefixes for _ in range(num_samples)])

    comps = [[0, 1, 2, 1, 3], [0, 0]]
    ro = Rollouts(["q"], [[0]], comps, [np.zeros(len(c), np.float32) for c in comps], ["a\nb\nc", "aa"],
                  np.array([[1.0, 0.0]], np.float32), ["eos", "eos"], [{}, {}])
    ctx = Context(_Tok(), sample, _reward, np.random.default_rng(0), 0, max_new_tokens=8)
    assert VinePPO(vine_samples=2).values(ro, ctx)[1] == VinePPO(vine_samples=2, vine_prompts_per_call=1).values(
        ro, ctx)[1]
    assert seen == [{}, {"prompts_per_call": 1}]
    with pytest.raises(ValueError, match="vine_prompts_per_call=-1"):
        VinePPO(vine_prompts_per_call=-1)


@pytest.fixture(scope="module")
def vine_run(tmp_path_factory):
    import jax

    from tiny import ARITH, arith_tokenizer, tiny_model

    from jaxrl_reason.data.arithmetic import arithmetic_examples
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.rewards.base import RewardResult
    from jaxrl_reason.train.trainer import Trainer, TrainerConfig

    tok = arith_tokenizer(str(tmp_path_factory.mktemp("tok")))

    def reward(texts, ex):
        return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])

    cfg = TrainerConfig(steps=1, prompts_per_step=2, samples_per_prompt=4, max_new_tokens=16, lr=1e-3,
                        temperature=1.0, checkpoint_every=0, progress=False, seed=5)
    model = tiny_model(tok, seed=2)
    method = make_method({"name": "vineppo_v", "extra": {"vine_samples": 2, "max_steps": 3, "boundary_text": " "}})
    tr = Trainer(model, tok, method, arithmetic_examples(32, seed=1, config=ARITH), reward, cfg,
                 str(tmp_path_factory.mktemp("run")))
    p0 = [np.asarray(x) for x in jax.tree.leaves(tr.state.params)]
    m = tr.train_step()
    p1 = [np.asarray(x) for x in jax.tree.leaves(tr.state.params)]
    return m, max(float(np.abs(a - b).max()) for a, b in zip(p0, p1))


@pytest.mark.slow
def test_vineppo_v_trains_end_to_end_and_logs_its_sampling_cost(vine_run):
    m, moved = vine_run
    assert m["vine/boundaries_per_seq"] > 0 and m["vine/extra_tokens"] > 0 and m["vine/extra_seconds"] > 0
    assert "loss/pg" in m and "loss/verify" in m  # VinePPO^V: both terms in one update
    assert moved > 0
