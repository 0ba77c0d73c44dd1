"""DAPO's overlong handling (Yu et al. 2025, §3.4): a soft length penalty near the generation limit, and
truncated samples left out of the loss.

Shaping adds to the reward of a completion of L tokens, with limit L_max and buffer L_cache,

    0                                   if L <= L_max - L_cache
    factor * ((L_max - L_cache) - L) / L_cache   otherwise (down to -factor at L = L_max),

before group normalisation, as verl's DAPO reward manager does. Filtering masks every token of a truncated
sample out of the loss (it still counts in its group's reward statistics).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def check_overlong(buffer: int, factor: float) -> None:
    if int(buffer) < 0:
        raise ValueError(f"overlong_buffer (DAPO's L_cache) must be >= 0 tokens (0 = no shaping), got {buffer}")
    if factor < 0:
        raise ValueError(f"overlong_penalty (the penalty at the length limit) must be >= 0, got {factor}")


def overlong_penalty(lengths: Sequence[int], max_len: int, buffer: int, factor: float = 1.0) -> np.ndarray:
    """float32 [N] reward additions (<= 0) for completions of `lengths` tokens under the limit `max_len`."""
    check_overlong(buffer, factor)
    lengths = np.asarray(lengths, np.float64)
    if buffer == 0:
        return np.zeros(lengths.shape, np.float32)
    if not 0 < buffer <= max_len:
        raise ValueError(f"overlong_buffer={buffer} must be in (0, max_new_tokens={max_len}]; the penalty ramps over "
                         "the last overlong_buffer tokens before the generation limit")
    expected = max_len - buffer
    return (factor * np.minimum((expected - lengths) / buffer, 0.0)).astype(np.float32)


def truncated_mask(finish: Sequence[str]) -> np.ndarray:
    """bool [N]: the samples that hit the length limit (finish reason "length")."""
    return np.asarray([f == "length" for f in finish], bool)
