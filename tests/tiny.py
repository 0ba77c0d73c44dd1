"""Tiny models, a tiny arithmetic tokenizer and scripted rewards shared by the trainer/method tests."""
import numpy as np

from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples
from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.models.qwen2 import ModelConfig, init_model
from jaxrl_reason.rewards.base import RewardResult

ARITH = ArithmeticConfig(min_digits=1, max_digits=1, operations=("+",))


def arith_tokenizer(out_dir, n=400, extra_texts=()):
    ex = arithmetic_examples(n, seed=1, config=ARITH)
    texts = [solve_prompt(e.question) for e in ex] + [e.solution for e in ex] + list(extra_texts)
    return train_tiny_tokenizer(texts, str(out_dir), vocab_size=300)


def tiny_model(tokenizer, seed=0, max_positions=512):
    cfg = ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                      tie_word_embeddings=True, rope_theta=10000.0)
    return init_model(cfg, seed=seed)


def assert_same_update(out, ref, params_before, keys, *, rtol, atol):
    """`out` (an UpdateOutput) equals `ref` on the metrics `keys` and on every parameter, and `ref` really moved
    the parameters away from `params_before` (so the comparison is not vacuous)."""
    import jax
    import numpy as np

    assert all(bool(v) for v in out.finite.values())
    for k in keys:
        np.testing.assert_allclose(float(out.metrics[k]), float(ref.metrics[k]), rtol=rtol, err_msg=k)
    moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip(jax.tree.leaves(ref.params), jax.tree.leaves(params_before)))
    assert moved > 1e-3
    for a, b in zip(jax.tree.leaves(out.params), jax.tree.leaves(ref.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol)


def padded_samples(rows, num_prompts, num_samples, logprob=lambda n: np.full(n, -0.5, np.float32)):
    """A scripted sampler's answer: token `rows` (prompt-major, `num_samples` a prompt) right-padded into a
    `SampleOutput`, each row's per-token log-probs `logprob(len(row))`."""
    from jaxrl_reason.sampling.sampler import SampleOutput

    n, width = len(rows), max(map(len, rows))
    tokens, lp = np.zeros((n, width), np.int32), np.zeros((n, width), np.float32)
    for i, r in enumerate(rows):
        tokens[i, :len(r)], lp[i, :len(r)] = r, logprob(len(r))
    return SampleOutput(tokens, lp, lp, np.array(list(map(len, rows)), np.int32), np.zeros(n, np.int32),
                        np.repeat(np.arange(num_prompts, dtype=np.int32), num_samples))


def scripted_rollouts(tok, rewards, texts, logprob=-0.5, max_tokens=None):
    """Rollouts of `rewards.shape[0]` arithmetic questions (seed 5) whose Q x G completions are `texts` (each cut
    to `max_tokens`, then EOS), graded `rewards` [Q, G], every sampled token's log-prob `logprob`."""
    from jaxrl_reason.methods.base import Rollouts

    ex = arithmetic_examples(rewards.shape[0], seed=5, config=ARITH)
    prompts = [tok.encode(tok.render_prompt(solve_prompt(e.question))) for e in ex]
    comps = [tok.encode(t)[:max_tokens] + [tok.eos_id] for t in texts]
    return Rollouts(ex, prompts, comps, [np.full(len(c), logprob, np.float32) for c in comps], list(texts),
                    rewards.astype(np.float32), ["eos"] * rewards.size, [{}] * rewards.size)


def right_reward(texts, examples):
    """1 for a completion that says RIGHT: scripted samplers write RIGHT / WRONG to set a row's reward."""
    return RewardResult(np.array(["RIGHT" in t for t in texts], np.float32), [{}] * len(texts))


def parity_reward(texts, examples):
    """The completion's length parity: a reward with signal on a random model, so a trainer step moves."""
    return RewardResult(np.array([len(t) % 2 for t in texts], np.float32), [{} for _ in texts])
