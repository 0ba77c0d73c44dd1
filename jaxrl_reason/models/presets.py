"""The config.json fields of the released models the launch configs use, so that a memory plan needs no download,
and the ModelConfig of a preset name or an HF directory / config.json."""
from __future__ import annotations

import json
import os

from jaxrl_reason.models.hf_port import config_from_hf

PRESETS = {
    "qwen2.5-math-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                              num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
                              rope_theta=10000.0, tie_word_embeddings=True, model_type="qwen2"),
    "qwen2.5-7b-instruct": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                                rope_theta=1e6, tie_word_embeddings=False, model_type="qwen2"),
    "qwen2.5-coder-1.5b-instruct": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                        num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                        max_position_embeddings=32768, rope_theta=1e6, tie_word_embeddings=True,
                                        model_type="qwen2"),
    "qwen3-4b": dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                     rope_theta=1e6, tie_word_embeddings=True, attention_bias=False, model_type="qwen3"),
    # Seed-Coder-8B's config.json (Base and Instruct share the architecture: Llama, 155k vocabulary)
    "seed-coder-8b-instruct": dict(vocab_size=155136, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=32768,
                                   rope_theta=500000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                   attention_bias=False, mlp_bias=False, model_type="llama"),
}


def load_model_config(name: str, param_dtype: str, dtype: str):
    """The ModelConfig of preset `name` (case-insensitive), or of the HF directory / config.json at `name`."""
    if name.lower() in PRESETS:
        hf = PRESETS[name.lower()]
    else:
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        if not os.path.isfile(path):
            raise ValueError(f"model {name!r} is neither a preset ({', '.join(PRESETS)}) nor a config.json / HF "
                             "directory")
        with open(path) as f:
            hf = json.load(f)
    return config_from_hf(hf, param_dtype=param_dtype, dtype=dtype)
