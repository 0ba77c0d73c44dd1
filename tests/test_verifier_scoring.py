"""RL^V verifier scores: exactly P("Yes") at the end of the rendered verify prompt, independent of batching."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrl_reason.data.arithmetic import arithmetic_examples
from jaxrl_reason.data.prompts import verify_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.rl import scoring
from jaxrl_reason.inference.verifier import (score, scores_from_logprobs, verdict_ids, verdict_logprobs,
                                             verify_prompts, verify_rows)
from jaxrl_reason.models.qwen2 import ModelConfig, init_model, positions_from_mask


def corpus():
    exs = arithmetic_examples(30, seed=5)
    return [verify_prompt(e.question, e.solution) + " Yes No" for e in exs] + [e.solution for e in exs]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return train_tiny_tokenizer(corpus(), tmp_path_factory.mktemp("tok"), vocab_size=320)


@pytest.fixture(scope="module")
def model(tok):
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    m = init_model(cfg, seed=1)
    # The default 0.02-std init gives nearly uniform next-token distributions; larger weights make P(Yes)
    # vary across inputs so the comparisons below can fail.
    nnx.update(m, jax.tree.map(lambda a: a * 6.0, nnx.state(m, nnx.Param)))
    return m


@pytest.fixture(scope="module")
def rows():
    exs = arithmetic_examples(5, seed=9)
    questions = [e.question for e in exs]
    # Solutions of very different lengths, including an empty one (a legitimate, wrong model output).
    solutions = [exs[0].solution, "The answer is \\boxed{3}.", "", exs[3].solution + "\n" + exs[1].solution,
                 "I think it is 12."]
    return questions, solutions


def manual_yes_no(model, tok, questions, solutions):
    """[N, 2] P(Yes), P(No) by a softmax over the last real position of one RIGHT-padded full forward (the
    scorer left-pads and projects only the last column: a different path to the same numbers)."""
    ids = [tok.encode(tok.render_prompt(verify_prompt(q, s))) for q, s in zip(questions, solutions)]
    width = max(map(len, ids))
    tokens = np.zeros((len(ids), width), np.int32)
    seg = np.zeros((len(ids), width), np.int32)
    for i, row in enumerate(ids):
        tokens[i, :len(row)], seg[i, :len(row)] = row, 1
    logits = np.asarray(model(jnp.asarray(tokens), jnp.asarray(positions_from_mask(seg)), jnp.asarray(seg)))
    last = np.stack([logits[i, len(row) - 1] for i, row in enumerate(ids)]).astype(np.float64)
    p = np.exp(last - last.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    yes, no = verdict_ids(tok)
    return p[:, [yes, no]]


def test_score_is_softmax_of_fresh_forward(model, tok, rows):
    questions, solutions = rows
    got = score(model, tok, questions, solutions)
    ref = manual_yes_no(model, tok, questions, solutions)[:, 0]
    assert got.shape == (5,) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-4)  # float32 logits of large weights
    assert np.ptp(ref) > 0.1 * ref.mean()  # the scores genuinely differ across rows


def test_normalized_score(model, tok, rows):
    questions, solutions = rows
    got = score(model, tok, questions, solutions, normalize=True)
    p = manual_yes_no(model, tok, questions, solutions)
    ref = p[:, 0] / p.sum(1)
    np.testing.assert_allclose(got, ref, rtol=1e-4)
    assert ((got >= 0) & (got <= 1)).all()
    # stable where both probabilities underflow
    np.testing.assert_allclose(scores_from_logprobs(np.array([[-800.0, -801.0]]), normalize=True),
                               [1 / (1 + np.exp(-1.0))], rtol=1e-6)


def test_scores_do_not_depend_on_batch_mates(model, tok, rows):
    questions, solutions = rows
    together = score(model, tok, questions, solutions, batch_size=8)
    alone = np.concatenate([score(model, tok, [q], [s]) for q, s in zip(questions, solutions)])
    # A much longer batch mate changes the padded width of the batch, not the short row's score.
    long_mate = score(model, tok, [questions[1], questions[0]], [solutions[1], solutions[0] * 6], batch_size=2)[0]
    np.testing.assert_allclose(alone, together, rtol=1e-5)
    np.testing.assert_allclose(long_mate, together[1], rtol=1e-5)


def test_bucketed_shapes_are_reused(model, tok, rows):
    questions, solutions = rows
    score(model, tok, questions[:4], solutions[:4], batch_size=4)
    before = scoring._end_logprobs._cache_size()
    # Different rows and lengths, same (batch, width) buckets: no new compile.
    score(model, tok, questions[:4], [s + " ok" for s in solutions[:4]], batch_size=4)
    score(model, tok, questions[1:5], solutions[:4], batch_size=4)
    assert scoring._end_logprobs._cache_size() == before


def test_state_override_scores_other_parameters(model, tok, rows):
    questions, solutions = rows
    other = init_model(model.config, seed=7)
    via_state = score(model, tok, questions, solutions, state=nnx.state(other))
    np.testing.assert_allclose(via_state, score(other, tok, questions, solutions), rtol=1e-6)
    assert not np.allclose(via_state, score(model, tok, questions, solutions))


def test_too_long_input_names_its_index(model, tok, rows):
    questions, solutions = rows
    lengths = [len(p) for p in verify_prompts(tok, questions, solutions)]
    assert int(np.argmax(lengths)) == 3
    limit = sorted(lengths)[-2]  # only row 3 is longer
    with pytest.raises(ValueError, match=rf"verifier input 3 has {lengths[3]} tokens, more than the limit of {limit}"):
        score(model, tok, questions, solutions, max_length=limit)
    with pytest.raises(ValueError, match="one question per solution"):
        score(model, tok, questions[:2], solutions)


def test_verify_rows_target_is_the_token_the_text_would_continue_with(tok, rows):
    questions, solutions = rows
    labels = [1, 0, 0, True, 0.0]
    vr = verify_rows(tok, questions, solutions, labels)
    yes, no = verdict_ids(tok)
    assert vr.targets.tolist() == [yes, no, no, yes, no] and vr.ids == (yes, no)
    assert vr.prompts == verify_prompts(tok, questions, solutions)
    for q, s, p, t, lab in zip(questions, solutions, vr.prompts, vr.targets, labels):
        word = "Yes" if lab else "No"
        assert p + [int(t)] == tok.encode(tok.render_prompt(verify_prompt(q, s)) + word)
    with pytest.raises(ValueError, match="labels must have shape"):
        verify_rows(tok, questions, solutions, [1, 0])


def test_verdict_logprobs_are_log_probabilities(model, tok, rows):
    questions, solutions = rows
    lp = verdict_logprobs(model, tok, questions, solutions)
    assert lp.shape == (5, 2) and (lp < 0).all()
    np.testing.assert_allclose(np.exp(lp[:, 0]), score(model, tok, questions, solutions), rtol=1e-6)


def test_worked_check_inputs_are_the_greedy_continuation_cut_at_the_verdict(model, tok, rows):
    """check_tokens > 0: the verdict is read after what the model writes greedily from the verify prompt, cut
    before its first verdict (or stop) token; the scores are P(Yes) at the end of exactly those inputs."""
    from jaxrl_reason.inference.verifier import verify_inputs
    from jaxrl_reason.sampling.sampler import sample

    questions, solutions = rows
    prompts = verify_prompts(tok, questions, solutions)
    assert verify_inputs(model, tok, questions, solutions) == prompts  # check_tokens=0: the prompt alone
    yes, no = verdict_ids(tok)
    ends = {yes, no, *tok.stop_ids}
    inputs = verify_inputs(model, tok, questions, solutions, check_tokens=12, batch_size=2)
    free = sample(model, prompts, jax.random.PRNGKey(3), max_new_tokens=12, temperature=0.0,
                  pad_id=tok.pad_id).completions()  # greedy without stop ids: the same tokens up to the first end
    for p, x, f in zip(prompts, inputs, free):
        f = list(f)
        first_end = next((i for i, t in enumerate(f) if t in ends), len(f))
        assert x == list(p) + f[:first_end]
    assert any(len(x) > len(p) for x, p in zip(inputs, prompts))
    lp = verdict_logprobs(model, tok, questions, solutions, check_tokens=12, batch_size=2)
    np.testing.assert_allclose(lp, scoring.token_logprobs_at_end(model, inputs, [yes, no], pad_id=tok.pad_id),
                               rtol=1e-5, atol=1e-6)
    # another batch size pads differently: on AVX-512 / AMX kernels that moves float32 sums by ~1e-6 relative
    np.testing.assert_allclose(lp, verdict_logprobs(model, tok, questions, solutions, inputs=inputs),
                               rtol=1e-5, atol=1e-6)
    assert not np.allclose(lp, verdict_logprobs(model, tok, questions, solutions), atol=1e-3)
    with pytest.raises(ValueError, match="check_tokens must be >= 0"):
        verify_inputs(model, tok, questions, solutions, check_tokens=-1)
