"""Truncated importance sampling (TIS) between the sampler's distribution and the policy being optimised.

The trainer optimises the tempered policy pi_T = softmax(logits / T) (docs/methods/grpo.md#spec-temperature), and pi_old
is its log-prob. The sampler may draw from something else: top-p / top-k truncate pi_T, and a bf16 or external engine
computes it with other numbers. Weighting each sampled token's loss by min(pi_old / q, C), q the sampling distribution,
removes that gap from the gradient up to the cap C (the correction verl, TRL, tunix and OpenRLHF offer).

Because the weight is positive, multiplying the PPO-clip (and dual-clip) loss of a token by it equals multiplying
its advantage by it, so the weights are folded into the per-token advantages the methods build; no loss term
changes. The gap itself is logged every step, whether or not it is corrected.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

TIS_MODES = ("off", "token", "sequence")


def check_tis(mode: str, cap: float) -> None:
    if mode not in TIS_MODES:
        raise ValueError(f"tis={mode!r} is unknown; choose one of {TIS_MODES} (off: no correction)")
    if not cap > 0:
        raise ValueError(f"tis_cap must be > 0 (the largest weight pi_old / q a token may get, e.g. 2.0), got {cap}")


def truncated_is_weights(old_logprobs: Sequence[np.ndarray], sampling_logprobs: Sequence[np.ndarray], *,
                         mode: str, cap: float) -> tuple[list[np.ndarray], dict]:
    """Per row, float32 [len] weights on the row's sampled tokens, and metrics of the gap.

    old_logprobs / sampling_logprobs: per row, log pi_old and log q of each sampled token.
    mode: "token": w_t = min(exp(old_t - q_t), cap); "sequence": every token of a row gets
    min(exp(sum_t (old_t - q_t)), cap); "off": all ones (the metrics are still computed).
    Metrics: tis/log_ratio_mean (mean over tokens of log pi_old - log q), tis/log_ratio_max (its largest absolute
    value), tis/weight_mean (mean applied weight over tokens), tis/capped_frac (share of tokens whose weight the
    cap lowered).
    """
    check_tis(mode, cap)
    if len(old_logprobs) != len(sampling_logprobs):
        raise ValueError(f"truncated_is_weights: {len(old_logprobs)} rows of old log-probs but "
                         f"{len(sampling_logprobs)} of sampling log-probs")
    log_cap = float(np.log(cap))
    weights, ratios, capped = [], [], []
    for i, (old, q) in enumerate(zip(old_logprobs, sampling_logprobs)):
        old, q = np.asarray(old, np.float64), np.asarray(q, np.float64)
        if old.shape != q.shape:
            raise ValueError(f"truncated_is_weights: row {i} has {old.shape} old log-probs and {q.shape} sampling "
                             "log-probs; give one of each per sampled token")
        d = old - q
        ratios.append(d)
        if mode == "off":
            w, c = np.ones_like(d), np.zeros(d.shape, bool)
        elif mode == "token":
            c = d > log_cap
            w = np.exp(np.minimum(d, log_cap))
        else:
            total = d.sum()
            c = np.full(d.shape, total > log_cap)
            w = np.full(d.shape, np.exp(min(total, log_cap)))
        weights.append(w.astype(np.float32))
        capped.append(c)
    flat = np.concatenate(ratios) if ratios else np.zeros((0,))
    w_flat = np.concatenate(weights) if weights else np.zeros((0,))
    metrics = {"tis/log_ratio_mean": float(flat.mean()) if flat.size else 0.0,
               "tis/log_ratio_max": float(np.abs(flat).max()) if flat.size else 0.0,
               "tis/weight_mean": float(w_flat.mean()) if w_flat.size else 1.0,
               "tis/capped_frac": float(np.concatenate(capped).mean()) if flat.size else 0.0}
    return weights, metrics
