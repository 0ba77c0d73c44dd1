"""Chip peaks and the analytic cost of the work an RL step does: what `experiments/bench/accelerator.py` (measured on a
device) and `experiment.compile_check` (compiled for a topology, no device) both read, written once.

FLOPs count the useful work of a dense decoder (rematerialisation not counted): a matmul of an [n, k] activation by
a [k, m] weight is 2 n k m forward and 4 n k m backward, so
    forward  = 2 x (matmul weights of the layers) x (tokens through the layers)
             + 2 x vocab x hidden x (positions whose logits are computed)
             + 4 x layers x heads x head_dim x (sum over the tokens of the keys each attends to, itself included)
and a forward + backward pass is 3x that. Bytes: a decode step must read every parameter once and the valid KV
cache once (the roofline of the sampler).
"""
from __future__ import annotations

from typing import NamedTuple, Optional


class Chip(NamedTuple):
    name: str
    hbm_gbs: float  # peak HBM bandwidth, GB/s (1e9)
    tflops: float  # peak dense bf16 TFLOP/s
    hbm_gib: Optional[float]  # HBM capacity of one JAX device, GiB (None: the part comes in several sizes)


# (lower-case substrings that must all occur in device_kind, chip). First match wins, so the more specific entries
# come first. One entry is one JAX device (a TPU chip). Vendor datasheets.
PEAKS = [
    (("gh200",), Chip("NVIDIA GH200 (HBM3)", 4000.0, 989.0, 96.0)),
    (("h200", "nvl"), Chip("NVIDIA H200 NVL", 4800.0, 835.0, 141.0)),
    (("h200",), Chip("NVIDIA H200 SXM", 4800.0, 989.0, 141.0)),
    (("h100", "nvl"), Chip("NVIDIA H100 NVL", 3900.0, 835.0, 94.0)),
    (("h100", "pcie"), Chip("NVIDIA H100 PCIe", 2000.0, 756.0, 80.0)),
    (("h100",), Chip("NVIDIA H100 SXM", 3350.0, 989.0, 80.0)),
    (("a100", "40gb"), Chip("NVIDIA A100 40GB", 1555.0, 312.0, 40.0)),
    (("a100", "pcie"), Chip("NVIDIA A100 80GB PCIe", 1935.0, 312.0, 80.0)),
    (("a100",), Chip("NVIDIA A100 80GB SXM", 2039.0, 312.0, 80.0)),
    (("tpu v4",), Chip("TPU v4", 1200.0, 275.0, 32.0)),
    (("tpu v5 lite",), Chip("TPU v5e", 819.0, 197.0, 16.0)),
    (("tpu v5e",), Chip("TPU v5e", 819.0, 197.0, 16.0)),
    (("tpu v5",), Chip("TPU v5p", 2765.0, 459.0, 95.0)),
    (("tpu v6",), Chip("TPU v6e", 1640.0, 918.0, 32.0)),
]


def chip_for(device_kind: str) -> Optional[Chip]:
    """The table's chip for a `jax.Device.device_kind`, or None."""
    kind = device_kind.lower()
    for needles, chip in PEAKS:
        if all(n in kind for n in needles):
            return chip
    return None


def peak_for(device_kind: str) -> Optional[tuple[str, float, float]]:
    """(name, peak HBM GB/s, peak dense bf16 TFLOP/s) of a device kind, or None."""
    chip = chip_for(device_kind)
    return None if chip is None else (chip.name, chip.hbm_gbs, chip.tflops)


def layer_matmul_params(cfg) -> int:
    """Weights of one decoder layer's matmuls (q/k/v, o, gate/up/down): what 6 x N counts per token."""
    h, d, i = cfg.hidden_size, cfg.dim_per_head, cfg.intermediate_size
    nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    return h * d * (nq + 2 * nkv) + nq * d * h + 3 * h * i


def causal_pairs(n: int) -> int:
    """Keys attended by a causal run of n tokens (each token sees itself and those before it)."""
    return n * (n + 1) // 2


def forward_flops(cfg, tokens: int, attended_pairs: int, head_positions: int) -> dict:
    """FLOPs of one forward pass (see the module docstring): layers, LM head and attention parts and their sum."""
    layers = 2 * cfg.num_hidden_layers * layer_matmul_params(cfg) * tokens
    head = 2 * cfg.vocab_size * cfg.hidden_size * head_positions
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.dim_per_head * attended_pairs
    return dict(flops_layers=layers, flops_head=head, flops_attention=attention, flops=layers + head + attention)


def grpo_model_flops(cfg, prompts: int, samples: int, prompt_len: int, completion_len: int, shared: bool) -> dict:
    """Model FLOPs of one update (forward + backward) on `prompts x samples` rows: each prompt once when `shared`
    (a completion token sees its prompt and the completion so far), else every row whole; the LM head at the
    completion positions only."""
    rows = prompts * samples
    if shared:
        tokens = prompts * prompt_len + rows * completion_len
        attended = prompts * causal_pairs(prompt_len) + rows * (completion_len * prompt_len
                                                                + causal_pairs(completion_len))
    else:
        tokens = rows * (prompt_len + completion_len)
        attended = rows * causal_pairs(prompt_len + completion_len)
    head_tokens = rows * completion_len
    f = forward_flops(cfg, tokens, attended, head_tokens)
    return dict(tokens_forwarded=tokens, trained_tokens=head_tokens, attended_pairs=attended,
                flops_layers=3 * f["flops_layers"], flops_head=3 * f["flops_head"],
                flops_attention=3 * f["flops_attention"], model_flops=3 * f["flops"])


def decode_bytes(cfg, batch: int, prompt_len: int, new_tokens: int, param_bytes: int, kv_itemsize: int) -> dict:
    """Bytes one decode step must read on average: every parameter once, and the KV cache at the step's mean
    context (step s attends prompt + s + 1 keys, so the mean is prompt + (new + 1) / 2)."""
    mean_context = prompt_len + (new_tokens + 1) / 2
    kv = kv_bytes(cfg, batch, mean_context, kv_itemsize)
    return dict(mean_context=mean_context, param_bytes=int(param_bytes), kv_bytes_per_step=float(kv),
                bytes_per_step=float(param_bytes + kv))


def kv_bytes(cfg, rows: int, slots: float, itemsize: int) -> float:
    """Keys and values of every layer for `rows` rows of `slots` cache slots."""
    return 2.0 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.dim_per_head * slots * rows * itemsize


def decode_flops(cfg, rows: int, prompt_len: int, new_tokens: int) -> int:
    """FLOPs of `new_tokens` single-token steps on `rows` rows: every step runs the layers and the LM head on one
    token per row and attends over the prompt and the tokens so far."""
    attended = rows * (new_tokens * prompt_len + causal_pairs(new_tokens))
    return forward_flops(cfg, rows * new_tokens, attended, rows * new_tokens)["flops"]
