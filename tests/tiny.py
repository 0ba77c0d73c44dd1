"""Tiny models and a tiny arithmetic tokenizer shared by the trainer/method tests."""
from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples
from jaxrl_reason.data.prompts import solve_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.models.qwen2 import ModelConfig, init_model

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
