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
