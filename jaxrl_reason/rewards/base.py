"""The contract every verifier (math, code, ...) follows."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np


class RewardResult(NamedTuple):
    """Scores for a batch of model outputs.

    scores:  float32 [batch] — the reward of each item (binary 0/1 for the outcome verifiers).
    details: one dict per item with what the verifier saw (extracted answer, timeout, parse failure, per-test
             results, ...); these feed metrics and debugging, never control flow in the trainer.
    """

    scores: np.ndarray
    details: Sequence[dict[str, Any]]


def summarize_details(details: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    """Fraction of items whose detail flag `key` is truthy, for each key (e.g. 'timeout', 'no_answer')."""
    n = max(len(details), 1)
    return {k: sum(bool(d.get(k)) for d in details) / n for k in keys}
