"""Tiny random Hugging Face checkpoints, written by `transformers` itself, for parity tests."""
from __future__ import annotations

import os

import numpy as np

TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, rms_norm_eps=1e-6)

VARIANTS = {
    # Qwen2: untied embeddings, GQA 4 -> 2 heads, q/k/v bias
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2, tie_word_embeddings=False,
                                                       rope_theta=10000.0)),
    # Qwen2.5-style small model: tied embeddings, a single KV head, large rope_theta
    "qwen2.5": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=1, tie_word_embeddings=True,
                                                         rope_theta=1e6)),
    # Qwen3: q/k RMSNorm, no bias, explicit head_dim different from hidden/heads
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                                                       rope_theta=1e6, attention_bias=False)),
    # Llama with llama3 rope scaling, untied embeddings
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_key_value_heads=2, tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64})),
}


def make_hf_model(kind: str, seed: int = 0):
    import torch
    import transformers

    cfg_name, model_name, extra = VARIANTS[kind]
    kw = dict(TINY, **extra)
    if "rope_theta" in kw and kind != "llama":
        kw["rope_parameters"] = {"rope_theta": kw.pop("rope_theta"), "rope_type": "default"}
    if kind == "llama":
        rs = dict(kw.pop("rope_scaling"))
        rs["rope_theta"] = kw.pop("rope_theta")
        kw["rope_parameters"] = rs
    cfg = getattr(transformers, cfg_name)(**kw)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(cfg).eval()
    # Random init leaves norms at 1 and biases at 0; perturb them so the test sees every parameter.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0, 0.05)
    return model


def save_hf_model(kind: str, path: str, seed: int = 0):
    model = make_hf_model(kind, seed)
    model.save_pretrained(path)
    return model


def torch_logits(model, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
    import torch

    with torch.no_grad():
        t = torch.tensor(np.asarray(tokens), dtype=torch.long)
        am = None if attention_mask is None else torch.tensor(np.asarray(attention_mask), dtype=torch.long)
        pos = None
        if am is not None:
            pos = (am.cumsum(-1) - 1).clamp(min=0)
        return model(input_ids=t, attention_mask=am, position_ids=pos).logits.float().numpy()


def write_dir(path):
    os.makedirs(path, exist_ok=True)
    return path
