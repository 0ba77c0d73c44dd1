"""The sampler: exact greedy parity, trustworthy log-probs, correct distributions, stops, no recompiles."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from hf_fixtures import save_hf_model
from jaxrl_reason.models.hf_port import load_pretrained
from jaxrl_reason.sampling import sampler as sampler_mod
from jaxrl_reason.sampling.logits import keep_threshold, sample_step
from jaxrl_reason.rl.scoring import completion_logprobs
from jaxrl_reason.sampling.sampler import FINISH_EOS, FINISH_LENGTH, FINISH_STOP, sample


@pytest.fixture(scope="module")
def hf_and_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("hf") / "qwen2")
    hf = save_hf_model("qwen2", path, seed=2)
    return hf, load_pretrained(path)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 97, n).tolist() for n in (5, 12, 9)]


def test_greedy_equals_transformers_generate(hf_and_model, prompts):
    import torch

    hf, model = hf_and_model
    out = sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=32, temperature=0.0)
    assert (out.lengths == 32).all() and (out.finish_reason == FINISH_LENGTH).all()
    for i, p in enumerate(prompts):
        ref = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                          max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)[0, len(p):]
        assert out.tokens[i].tolist() == ref.tolist()


def test_logprobs_equal_fresh_forward(hf_and_model, prompts):
    _, model = hf_and_model
    for kw in (dict(temperature=1.0), dict(temperature=0.7, top_k=10), dict(temperature=1.3, top_p=0.8)):
        out = sample(model, prompts, jax.random.PRNGKey(1), max_new_tokens=24, num_samples=3, **kw)
        # pi_old is the tempered policy softmax(logits / T), untruncated (docs/methods/grpo.md#spec-temperature)
        ref = completion_logprobs(model, None, [prompts[i] for i in out.prompt_index], out.completions(),
                                  temperature=kw["temperature"])
        for r, lp, n in zip(ref, out.logprobs, out.lengths):
            np.testing.assert_allclose(lp[:n], r, atol=1e-5)
            assert (lp[n:] == 0).all()
    # at temperature 1 without filters the sampling distribution is the policy
    out = sample(model, prompts, jax.random.PRNGKey(2), max_new_tokens=8)
    np.testing.assert_allclose(out.sampling_logprobs, out.logprobs, atol=1e-5)


def test_samples_of_one_prompt_share_prefill_but_differ(hf_and_model, prompts):
    _, model = hf_and_model
    out = sample(model, prompts, jax.random.PRNGKey(3), max_new_tokens=16, num_samples=4)
    assert out.tokens.shape == (12, 16)
    np.testing.assert_array_equal(out.prompt_index, np.repeat(np.arange(3), 4))
    assert len({tuple(t) for t in out.tokens[:4].tolist()}) > 1
    greedy = sample(model, prompts, jax.random.PRNGKey(3), max_new_tokens=16, num_samples=4, temperature=0.0)
    for i in range(3):
        assert (greedy.tokens[4 * i:4 * i + 4] == greedy.tokens[4 * i]).all()


def test_topk_sampler_stays_inside_topk(hf_and_model, prompts):
    _, model = hf_and_model
    k = 3
    out = sample(model, prompts, jax.random.PRNGKey(4), max_new_tokens=20, num_samples=4, temperature=1.5,
                 top_k=k)
    seqs = np.zeros((len(out.tokens), 32), np.int32)
    for row, (i, n) in enumerate(zip(out.prompt_index, out.lengths)):
        seqs[row, :len(prompts[i]) + n] = prompts[i] + out.tokens[row, :n].tolist()
    all_logits = np.asarray(model(jnp.asarray(seqs), jnp.broadcast_to(jnp.arange(32), seqs.shape)))
    for row, (i, n) in enumerate(zip(out.prompt_index, out.lengths)):
        for t in range(n):
            step_logits = all_logits[row, len(prompts[i]) - 1 + t]
            kth = np.sort(step_logits)[-k]
            assert step_logits[out.tokens[row, t]] >= kth - 1e-6


def _chi_square_pvalue(draws, probs):
    counts = np.bincount(draws, minlength=len(probs)).astype(np.float64)
    probs = np.asarray(probs, np.float64)
    keep = probs > 0
    assert counts[~keep].sum() == 0, "drew a token of probability zero"
    expected = probs[keep] / probs[keep].sum() * counts.sum()
    return stats.chisquare(counts[keep], expected).pvalue


def filter_logits(logits, top_k, top_p):
    """The reference truncation: -inf outside the top-k and the top-p nucleus."""
    return jnp.where(logits >= keep_threshold(logits, top_k, top_p), logits, -jnp.inf)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.6, 1.0, 0), (1.4, 1.0, 0), (1.0, 0.7, 0),
                                                     (0.8, 1.0, 5)])
def test_step_frequencies_match_softmax(temperature, top_p, top_k):
    vocab, draws = 12, 40_000
    logits = jax.random.normal(jax.random.PRNGKey(7), (vocab,)) * 1.5
    batch = jnp.broadcast_to(logits, (draws, vocab))
    s = sample_step(batch, jax.random.PRNGKey(11), temperature, top_p, top_k)
    target = np.asarray(jax.nn.softmax(filter_logits((logits / temperature)[None], jnp.int32(top_k),
                                                      jnp.float32(top_p))[0]))
    if top_k:
        assert (target > 0).sum() == top_k
    if top_p < 1:
        assert 1 < (target > 0).sum() < vocab
    assert _chi_square_pvalue(np.asarray(s.token), target) > 1e-3
    np.testing.assert_allclose(np.asarray(s.sampling_logprob), np.log(target[np.asarray(s.token)]), atol=1e-5)
    np.testing.assert_allclose(np.asarray(s.logprob),
                               np.asarray(jax.nn.log_softmax(logits / temperature))[np.asarray(s.token)], atol=1e-5)


def test_sampler_is_wrong_if_distribution_is_wrong():
    # the chi-square check above has power: a temperature mix-up is detected
    vocab = 12
    logits = jax.random.normal(jax.random.PRNGKey(7), (vocab,)) * 1.5
    s = sample_step(jnp.broadcast_to(logits, (40_000, vocab)), jax.random.PRNGKey(11), 0.6, 1.0, 0)
    assert _chi_square_pvalue(np.asarray(s.token), np.asarray(jax.nn.softmax(logits))) < 1e-6


def test_large_vocab_draw_is_unbiased():
    # 3 blocks of the two-level inverse CDF, with mass concentrated across block edges
    vocab = 1500
    logits = jnp.full((vocab,), -30.0).at[jnp.array([0, 511, 512, 1023, 1024, 1499])].set(
        jnp.array([0.0, 0.5, 1.0, -0.5, 0.2, 0.7]))
    s = sample_step(jnp.broadcast_to(logits, (30_000, vocab)), jax.random.PRNGKey(5), 1.0, 1.0, 0)
    assert _chi_square_pvalue(np.asarray(s.token), np.asarray(jax.nn.softmax(logits))) > 1e-3


def test_stop_ids_end_exactly_the_right_rows(hf_and_model, prompts):
    _, model = hf_and_model
    greedy = sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=24, temperature=0.0)
    stop = int(greedy.tokens[1, 6])  # the 7th token of row 1
    first = [next((t for t in range(24) if greedy.tokens[r, t] == stop), None) for r in range(3)]
    out = sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=24, temperature=0.0,
                 stop_token_ids=[stop], pad_id=0)
    for r in range(3):
        if first[r] is None:
            assert out.lengths[r] == 24 and out.finish_reason[r] == FINISH_LENGTH
            np.testing.assert_array_equal(out.tokens[r], greedy.tokens[r])
        else:
            n = first[r] + 1
            assert out.lengths[r] == n and out.finish_reason[r] == FINISH_EOS
            np.testing.assert_array_equal(out.tokens[r, :n], greedy.tokens[r, :n])
            assert (out.tokens[r, n:] == 0).all() and (out.logprobs[r, n:] == 0).all()
    assert first[1] == 6 or first[1] < 6


class CharTokenizer:
    """Each id is one letter: decoding is exact and the stop position is easy to predict."""

    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def test_stop_strings_cut_completion_and_logprobs(hf_and_model, prompts):
    _, model = hf_and_model
    tok = CharTokenizer()
    greedy = sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=40, temperature=0.0)
    text0 = tok.decode(greedy.tokens[0].tolist())
    stop = text0[10:12]  # a 2-character string, ending at token 11 of row 0 (or earlier)
    out = sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=40, temperature=0.0,
                 stop_strings=[stop], tokenizer=tok, pad_id=0, chunk_steps=8)
    for r in range(3):
        text = tok.decode(greedy.tokens[r].tolist())
        at = text.find(stop)
        if at < 0:
            assert out.finish_reason[r] == FINISH_LENGTH and out.lengths[r] == 40
            continue
        n = at + len(stop)
        assert out.finish_reason[r] == FINISH_STOP and out.lengths[r] == n
        np.testing.assert_array_equal(out.tokens[r, :n], greedy.tokens[r, :n])
        assert (out.tokens[r, n:] == 0).all() and (out.logprobs[r, n:] == 0).all()
        np.testing.assert_allclose(out.logprobs[r, :n], greedy.logprobs[r, :n], atol=1e-6)
    assert out.lengths[0] <= 12


def test_changing_sampling_params_does_not_recompile(hf_and_model, prompts):
    _, model = hf_and_model
    sample(model, prompts, jax.random.PRNGKey(0), max_new_tokens=8, temperature=1.0)
    before = (sampler_mod.decode._cache_size(), sampler_mod.prefill._cache_size())
    for kw in (dict(temperature=0.3), dict(temperature=0.0), dict(top_p=0.5), dict(top_k=4),
               dict(temperature=2.0, top_k=2, top_p=0.9), dict(stop_token_ids=[1, 2])):
        sample(model, prompts, jax.random.PRNGKey(1), max_new_tokens=8, **kw)
    # a new prompt length inside the same bucket does not recompile either
    sample(model, [p[:-1] for p in prompts], jax.random.PRNGKey(1), max_new_tokens=8)
    assert (sampler_mod.decode._cache_size(), sampler_mod.prefill._cache_size()) == before


def test_kv_cache_is_donated(hf_and_model, prompts):
    _, model = hf_and_model
    from flax import nnx

    graphdef, state = nnx.split(model)
    toks = jnp.asarray([[0] * 11 + prompts[0]], jnp.int32)
    cache, last = sampler_mod.prefill(graphdef, state, toks, jnp.asarray([5]), num_samples=1, max_new_tokens=4)
    carry = sampler_mod.DecodeCarry(cache, last, jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4)), jnp.zeros((1, 4)),
                               jnp.zeros((1,), bool), jnp.zeros((1,), jnp.int32), jnp.zeros((1,), jnp.int32),
                               jnp.asarray([5]), jnp.zeros((), jnp.int32), jax.random.PRNGKey(0))
    new = sampler_mod.decode(graphdef, state, carry, jnp.int32(4), jnp.float32(1.0), jnp.float32(1.0),
                             jnp.int32(0), jnp.full((8,), -1, jnp.int32), jnp.int32(0))
    assert all(a.is_deleted() for a in carry.cache.k + carry.cache.v)
    assert int(new.step) == 4


def test_callers_key_survives(hf_and_model, prompts):
    _, model = hf_and_model
    key = jax.random.PRNGKey(9)
    a = sample(model, prompts, key, max_new_tokens=4)
    b = sample(model, prompts, key, max_new_tokens=4)  # same key again: same draws
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_bad_input_errors(hf_and_model):
    _, model = hf_and_model
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="empty"):
        sample(model, [], key, max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        sample(model, [[1, 2], []], key, max_new_tokens=4)
    ctx = model.config.max_position_embeddings
    with pytest.raises(ValueError, match=r"prompt 0 has \d+ tokens.*context"):
        sample(model, [[1] * (ctx - 2)], key, max_new_tokens=4)
    with pytest.raises(ValueError, match="top_p"):
        sample(model, [[1]], key, max_new_tokens=4, top_p=0.0)
    with pytest.raises(ValueError, match="tokenizer"):
        sample(model, [[1]], key, max_new_tokens=4, stop_strings=["x"])


# ---------------------------------------------------------------------------------------------------------
# The single-token decode step and the sampling passes behind the fast decode loop.


def _perturbed_model(**cfg_kw):
    """A tiny model whose every parameter (biases and norm weights included) is random, so a misplaced bias,
    norm or head in the decode step changes the logits."""
    from flax import nnx

    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    cfg = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **cfg_kw)
    model = init_model(cfg, seed=3)
    graphdef, state = nnx.split(model)
    leaves, tree = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.PRNGKey(5), len(leaves))
    leaves = [x + 0.1 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]
    return nnx.merge(graphdef, jax.tree.unflatten(tree, leaves))


@pytest.mark.parametrize("cfg_kw", [
    dict(),  # Qwen2: q/k/v biases, separate lm_head
    # Qwen3's q/k norms with every other optional bias and a tied head: each flag of the decode step once
    dict(attention_bias=False, qk_norm=True, o_proj_bias=True, mlp_bias=True, tie_word_embeddings=True),
], ids=["qwen2", "qwen3-norms-biases-tied"])
def test_decode_step_equals_cached_forward(cfg_kw):
    from flax import nnx

    from jaxrl_reason.models.qwen2 import decode_layers, decode_step

    model = _perturbed_model(**cfg_kw)
    graphdef, state = nnx.split(model)
    toks = jnp.asarray([[0, 0, 5, 7, 9, 11], [3, 4, 5, 6, 7, 8]], jnp.int32)
    cache, _ = sampler_mod.prefill(graphdef, state, toks, jnp.asarray([4, 6]), num_samples=1, max_new_tokens=3)
    steps = jnp.asarray([[1, 2], [3, 4], [5, 6]], jnp.int32)
    lives = jnp.asarray([[True, True], [True, False], [True, True]])  # row 1 finished before the second step

    @jax.jit
    def both_paths(state, cache):
        m = nnx.merge(graphdef, state)
        layers = decode_layers(m)
        cache_a = cache_b = cache
        ref, got = [], []
        for i in range(3):
            pos = jnp.asarray([4, 6], jnp.int32) + i
            logits, cache_a = m(steps[i][:, None], pos[:, None], lives[i][:, None].astype(jnp.int32), cache=cache_a)
            hidden, cache_b = decode_step(m, layers, steps[i], pos, lives[i], cache_b)
            ref.append(logits[:, 0]), got.append(m.logits_from_hidden(hidden))
        return jnp.stack(ref), jnp.stack(got), cache_a, cache_b

    ref, got, cache_a, cache_b = both_paths(state, cache)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5)
    for a, b in zip(cache_a.k + cache_a.v + (cache_a.valid,), cache_b.k + cache_b.v + (cache_b.valid,)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    assert int(cache_b.index) == int(cache_a.index) == 9


def test_chunked_decode_draws_what_one_call_draws(hf_and_model, prompts):
    # a progress callback makes sample() decode in chunks; the draws of each step must not depend on that
    _, model = hf_and_model
    key = jax.random.PRNGKey(13)
    whole = sample(model, prompts, key, max_new_tokens=12, num_samples=2, temperature=1.2, top_k=20)
    seen = []
    chunked = sample(model, prompts, key, max_new_tokens=12, num_samples=2, temperature=1.2, top_k=20,
                     chunk_steps=5, progress=lambda done, total: seen.append(done))
    assert seen == [5, 10, 12]
    np.testing.assert_array_equal(chunked.tokens, whole.tokens)
    np.testing.assert_allclose(chunked.logprobs, whole.logprobs, atol=1e-6)


def test_block_size_divides_the_vocabulary_when_it_can():
    from jaxrl_reason.sampling.logits import block_size

    assert block_size(4096) == 512 and block_size(151936) == 128 and block_size(128256) == 256
    assert block_size(1500) == 512 and block_size(97) == 512  # no power-of-two divisor >= 64: ragged last block


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (1.3, 0.9, 4)])  # the policy's sums; filtered
def test_draw_is_unbiased_across_exact_blocks(temperature, top_p, top_k):
    # 384 = 3 blocks of 128 with no ragged block; the mass sits on both sides of each block edge
    vocab = 384
    logits = jnp.full((vocab,), -30.0).at[jnp.array([0, 127, 128, 255, 256, 383])].set(
        jnp.array([0.0, 0.5, 1.0, -0.5, 0.2, 0.7]))
    s = sample_step(jnp.broadcast_to(logits, (30_000, vocab)), jax.random.PRNGKey(8), temperature, top_p, top_k)
    target = np.asarray(jax.nn.softmax(filter_logits((logits / temperature)[None], jnp.int32(top_k),
                                                      jnp.float32(top_p))[0]))
    assert _chi_square_pvalue(np.asarray(s.token), target) > 1e-3
    np.testing.assert_allclose(np.asarray(s.sampling_logprob), np.log(target[np.asarray(s.token)]), atol=1e-5)


def test_greedy_picks_the_first_of_tied_maxima():
    logits = jnp.asarray([[0.0, 2.0, 2.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    s = sample_step(logits, jax.random.PRNGKey(0), 0.0, 1.0, 0)
    np.testing.assert_array_equal(np.asarray(s.token), [1, 0])
    np.testing.assert_allclose(np.asarray(s.logprob), np.asarray(jax.nn.log_softmax(logits))[[0, 1], [1, 0]],
                               atol=1e-6)


def test_windowed_decode_samples_what_the_full_cache_decode_samples():
    """decode's window phases attend over a prefix of the cache that holds every written slot (the masked slots
    after it are not read): the same tokens, lengths and finish reasons as one loop over every slot, log-probs
    within an ulp (sums over a shorter axis) -- at temperature 1 and greedy, in one call and chunked across phase
    boundaries, with rows stopping early. On CPU the default is the one full-cache loop: bitwise unchanged."""
    from flax import nnx

    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    cfg = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=1024)
    model = init_model(cfg, 3)
    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(0)
    b, l, new = 4, 16, 400
    tokens = jnp.asarray(rng.integers(1, 97, (b, l)), jnp.int32)
    lengths = jnp.asarray([16, 9, 12, 5], jnp.int32)
    assert len(sampler_mod.decode_windows(l + new, new, 4)) == 4

    def run(temperature, phases, stop_ids, chunks=(new,)):
        cache, last = sampler_mod.prefill(graphdef, state, tokens, lengths, num_samples=1, max_new_tokens=new)
        carry = sampler_mod.DecodeCarry(
            cache, last, jnp.zeros((b, new), jnp.int32), jnp.zeros((b, new), jnp.float32),
            jnp.zeros((b, new), jnp.float32), jnp.zeros((b,), bool), jnp.full((b,), FINISH_LENGTH, jnp.int32),
            jnp.zeros((b,), jnp.int32), jnp.array(lengths, copy=True), jnp.zeros((), jnp.int32),
            jax.random.PRNGKey(7))  # the carry is donated: positions get their own copy of the lengths
        stop = jnp.asarray(stop_ids + [-1] * (sampler_mod.MAX_STOP_IDS - len(stop_ids)), jnp.int32)
        for end in chunks:
            carry = sampler_mod.decode(graphdef, state, carry, jnp.int32(end), jnp.float32(temperature),
                                       jnp.float32(1.0), jnp.int32(0), stop, jnp.int32(0), window_phases=phases)
        return jax.device_get((carry.tokens, carry.logprobs, carry.sampling_logprobs, carry.lengths, carry.finish))

    for temperature, stop_ids in ((1.0, []), (1.0, [5, 11]), (0.0, [])):
        full = run(temperature, 1, stop_ids)
        if stop_ids:
            assert full[3].min() < new  # some rows stop early
        else:
            assert (full[3] == new).all()  # every row crosses every window
        for got in (run(temperature, 4, stop_ids), run(temperature, 4, stop_ids, chunks=(50, 150, 333, new))):
            for i in (0, 3, 4):  # tokens, lengths, finish
                np.testing.assert_array_equal(got[i], full[i])
            for i in (1, 2):  # log-probs, sampling log-probs
                np.testing.assert_allclose(got[i], full[i], rtol=0, atol=4e-6)
        for a, e in zip(run(temperature, None, stop_ids), full):  # the CPU default
            np.testing.assert_array_equal(a, e)


def test_sampling_in_prompt_chunks_samples_what_one_call_samples():
    """sample(prompts_per_call=k): prefill and decode k prompts at a time (a KV cache of k prompts' rows), each row
    drawing the uniforms of its row in the whole batch at the whole batch's padded prompt length: tokens, lengths,
    finish reasons and prompt indices equal one call's and log-probs agree to float32 rounding (XLA:CPU's matmuls
    round a 7-row batch and a 1-row one differently, ~1 ulp), with a last chunk shorter than the others, stop ids,
    several samples a prompt, and stop strings (host-side cuts between decode chunks)."""
    from jaxrl_reason.models.qwen2 import ModelConfig, init_model

    cfg = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    model = init_model(cfg, 5)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 97, int(n)).tolist() for n in (3, 9, 14, 5, 7, 12, 2)]

    class Chars:  # a stop-string tokenizer: token t is the letter chr(97 + t % 26)
        @staticmethod
        def decode(ids):
            return "".join(chr(97 + t % 26) for t in ids)

    key = jax.random.PRNGKey(11)
    for kw in (dict(num_samples=3, stop_token_ids=[4]), dict(num_samples=2, stop_strings=["q"], tokenizer=Chars(),
                                                              chunk_steps=5)):
        whole = sample(model, prompts, key, max_new_tokens=24, **kw)
        assert whole.lengths.min() < 24  # some rows stop early
        for per_call in (1, 3, 4):
            got = sample(model, prompts, key, max_new_tokens=24, prompts_per_call=per_call, **kw)
            for f in ("tokens", "lengths", "finish_reason", "prompt_index"):
                np.testing.assert_array_equal(getattr(got, f), getattr(whole, f))
            for f in ("logprobs", "sampling_logprobs"):
                np.testing.assert_allclose(getattr(got, f), getattr(whole, f), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="prompts_per_call must be >= 0"):
        sample(model, prompts, key, max_new_tokens=4, prompts_per_call=-1)
