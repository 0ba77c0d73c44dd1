"""The defaults the #58 audit changed or made selectable (docs/methods/cure.md, docs/methods/cipo.md), each shown
to do what the method's page says:

- CURE's prompts in the authors' instructions (`data.prompt_wording="authors"`): every instruction the authors
  give is there, the fields parse as before, and the knob reaches the prompts the method samples;
- CURE's critique budget defaults to the run's response budget, as the authors' run gives critiques;
- CIPO's correction stream keeps the risk-averse shaping: under the default estimator a right-source group's
  advantages are exactly alpha times those of a failed-source group with the same 0/1 rewards (a per-group std
  would make them equal);
- CIPO's default ratio rule does not ratchet rho under pure sampling noise, where the rule as written does.
"""
import numpy as np
import pytest

from jaxrl_reason.data.prompts import (CRITIQUE_FIELDS, PROMPT_WORDINGS, critique_prompt, critique_verdict_prefix,
                                       guided_prompt, parse_critique, solve_prompt)
from jaxrl_reason.experiment.config import DataSection
from jaxrl_reason.methods.base import RowFormats
from jaxrl_reason.methods.cipo import CIPO, RatioState, shape_correction_rewards, update_ratio
from jaxrl_reason.methods.cure import CURE

Q, S, H = "What is 3 + 4?", "3 + 4 = 8, so the answer is \\boxed{8}.", "check each sum once more before the end"


def test_the_authors_critique_wording_gives_each_of_their_instructions_and_parses_as_before():
    short, authors = critique_prompt(Q, S), critique_prompt(Q, S, wording="authors")
    assert Q in authors and S in authors and authors != short
    low = authors.lower()
    for instruction in ("never states a final answer has an error",  # a missing final answer is an error
                        "earliest step",  # the earliest of the errors that reach the answer
                        "when one error leads to others, pick the first",
                        "write a hint even when error_found is false",  # a hint for a right solution too
                        "name no specific number, symbol or line",  # no specific numbers in the hint
                        "must not give the next step, nor the answer",
                        "do not solve the problem"):
        assert instruction in low, instruction
    # the reply format is the same four fields, so a critique parses the same under either wording
    for f in CRITIQUE_FIELDS:
        assert f"\n{f}: " in authors
    reply = critique_verdict_prefix(True) + "ERROR_QUOTE: 3 + 4 = 8\nWHY_IT_MATTERS: the sum is 7\n" \
        f"HIGH_LEVEL_HINT: {H} and recount"
    assert not parse_critique(reply).format_errors
    assert critique_prompt(Q, S, "worked_check", "authors").count("First check the solution") == 1
    with pytest.raises(ValueError, match="data.prompt_wording"):
        critique_prompt(Q, S, wording="paper")


def test_the_authors_guided_wording_shows_the_problem_and_hint_never_the_attempt():
    for layout in ("after", "first"):
        p = guided_prompt(Q, H, layout, "authors")
        assert Q in p and H in p and S not in p and p != guided_prompt(Q, H, layout)
        assert "never mention the hint" in p and "step by step" in p
    assert guided_prompt(Q, H, "first", "authors").endswith(solve_prompt(Q))
    assert PROMPT_WORDINGS == ("short", "authors") and DataSection().prompt_wording == "short"
    assert RowFormats().prompt_wording == "short"


@pytest.fixture(scope="module")
def cure_step(tmp_path_factory):
    from tests import test_cure as tc
    from tests.tiny import tiny_model
    from jaxrl_reason.data.arithmetic import arithmetic_examples
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    ex = arithmetic_examples(30, seed=1, config=tc.ARITH)
    texts = [solve_prompt(e.question) for e in ex] + [e.solution for e in ex]
    texts += [critique_prompt(e.question, e.solution, wording=w) for e in ex for w in PROMPT_WORDINGS]
    texts += [guided_prompt(e.question, tc.HINT, wording=w) for e in ex for w in PROMPT_WORDINGS]
    tok = train_tiny_tokenizer(texts, str(tmp_path_factory.mktemp("tok")), vocab_size=640)
    return tc, tok, tiny_model(tok, seed=3, max_positions=2048)


class AnySampler:
    """The scripted CURE sampler, recognising the critique and guided prompts under either wording."""

    def __init__(self, tc, tok):
        self.inner, self.tok, self.prompts = tc.ScriptedSampler(tok), tok, []

    def __call__(self, prompts, **kw):
        texts = [self.tok.decode(p) for p in prompts]
        self.prompts += texts
        if "You are shown a problem and a solution" in texts[0]:
            return self.inner([self.tok.encode("Find the earliest error") for _ in texts], **kw)
        if "You are shown a problem and a hint" in texts[0]:
            return self.inner([self.tok.encode("Guidance for solving") for _ in texts], **kw)
        return self.inner(prompts, **kw)


def test_the_prompt_wording_reaches_the_prompts_cure_samples(cure_step):
    from flax import nnx
    from jaxrl_reason.methods.base import Context
    tc, tok, model = cure_step
    for wording, markers in (("short", ("Review the solution", "Guidance for solving")),
                             ("authors", ("You are shown a problem and a",))):
        sampler = AnySampler(tc, tok)
        ctx = Context(tok, sampler, tc.reward, np.random.default_rng(0), tok.pad_id, model, nnx.state(model),
                      formats=RowFormats(prompt_wording=wording))
        CURE(guided_samples=2, critique_max_new_tokens=32).build(tc.make_rollouts(tok), ctx)
        assert sampler.prompts and all(any(m in p for m in markers) for p in sampler.prompts), wording
        assert any("You are shown a problem and a hint" in p for p in sampler.prompts) == (wording == "authors")


def test_the_critique_budget_defaults_to_the_runs_response_budget():
    assert CURE().critique_max_new_tokens == 0  # 0 = the trainer's max_new_tokens (the authors: all 4,096)
    with pytest.raises(ValueError, match="critique_max_new_tokens must be >= 0"):
        CURE(critique_max_new_tokens=-1)


def test_the_default_correction_estimator_keeps_the_shaping_alpha_fold():
    """Two correction groups with the same 0/1 rewards, one of a right source (its wrong corrections are
    regressions) and one of a wrong source. Shaping maps the first to alpha * r - (alpha - 1); the default
    estimator (group mean, batch std) leaves that group alpha times the other's advantages, as docs/methods/cipo.md
    predicts; a per-group std cancels the shaping (ratio 1)."""
    r = np.array([[1, 0, 1, 0], [1, 0, 1, 0]], np.float32)
    src = np.array([True, False])
    for alpha in (1.5, 2.0, 4.0):
        shaped = shape_correction_rewards(r, src, alpha)
        a = CIPO(alpha=alpha).correction_advantages(shaped)  # the default estimator
        np.testing.assert_allclose(a[0], alpha * a[1], rtol=1e-5)
        g = CIPO(alpha=alpha, correction_estimator="grpo").correction_advantages(shaped)
        np.testing.assert_allclose(g[0], g[1], rtol=1e-5)


def test_the_default_ratio_rule_does_not_ratchet_rho_on_pure_noise():
    """Stationary retention 0.75 (inside [tau_low, tau_high]: nothing to react to), 16 corrections of successful
    sources a step, 100 steps, 20 noise seeds, the method's default knobs: the rule as the spec writes it
    (drop_test="step") ends at rho_max every time; the default ends around its start, as often below as above."""
    knobs = CIPO().ratio_knobs
    assert knobs["drop_test"] == "window"
    final = {"default": [], "step": []}
    for seed in range(20):
        hits = np.random.default_rng(100 + seed).binomial(16, 0.75, size=100)
        for name, kn in (("default", knobs), ("step", dict(knobs, drop_test="step"))):
            s = RatioState(0.5)
            for h in hits:
                s = update_ratio(s, int(h), 16, **kn)
            final[name].append(s.rho)
    assert np.allclose(final["step"], knobs["rho_max"])
    d = np.array(final["default"])
    assert abs(np.median(d) - 0.5) <= 0.1 and (d < 0.5).sum() >= 3 and (d > 0.5).sum() >= 3
    assert (d >= knobs["rho_max"] - 1e-9).sum() <= 1
