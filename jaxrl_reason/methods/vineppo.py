"""VinePPO's Monte-Carlo step advantages (METHODS.md §1), the pure core: step splitting on completion token ids
and per-token advantages from the values at step boundaries.

Not yet here: the GRPO subclass that samples the K continuations per boundary with ctx.sample (see the report of
issue #27 part 1). These functions are what it will call.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def step_boundaries(completion: Sequence[int], boundary_ids: Sequence[int], max_steps: int) -> list[int]:
    """Token positions where a new reasoning step starts, i.e. just after a boundary token (a newline id).

    Works on token ids, so no text-to-token mapping can drift. A run of boundary tokens ("\\n\\n", empty steps)
    yields one boundary, after its last token. No boundary at position 0 (that is s_0, the prompt) nor at the
    end of the completion (the terminal state, valued by the reward). Over `max_steps - 1` boundaries, an evenly
    spaced subset is kept (named choice: cover the whole solution rather than only its start).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps={max_steps}: must be >= 1 (1 = no interior boundary, the GRPO case)")
    ids = set(int(i) for i in boundary_ids)
    n = len(completion)
    out = [p + 1 for p in range(n - 1)
           if int(completion[p]) in ids and int(completion[p + 1]) not in ids]
    cap = max_steps - 1
    if len(out) > cap:
        keep = np.round(np.linspace(0, len(out) - 1, cap)).astype(int) if cap else np.zeros((0,), int)
        out = [out[i] for i in keep]
    return out


def step_advantages(length: int, boundaries: Sequence[int], values: Sequence[float], reward: float) -> np.ndarray:
    """float32 [length]: every token of step t gets V(s_{t+1}) - V(s_t); the last step gets reward - V(s_n).

    values: [len(boundaries) + 1] = V(s_0) (the prompt) then V at each boundary, in order."""
    if len(values) != len(boundaries) + 1:
        raise ValueError(f"values has {len(values)} entries; need len(boundaries) + 1 = {len(boundaries) + 1} "
                         "(V(s_0) then one per boundary)")
    v = list(map(float, values)) + [float(reward)]
    starts = [0] + list(boundaries)
    ends = list(boundaries) + [length]
    adv = np.zeros((length,), np.float32)
    for t, (a, b) in enumerate(zip(starts, ends)):
        adv[a:b] = v[t + 1] - v[t]
    return adv
