"""Shape buckets: the few sizes a varying length or row count is padded up to, so that jitted functions compile a
handful of times instead of once per shape. Every padding scheme of the package lives here.

- `power_of_two`: prompts and batches of the sampler and the verifier (cheap to pad, rarely recompiled).
- `length_bucket` over `LENGTH_BUCKETS`: training rows' time length, steps of ~1.25x (at most ~25% padding).
- `row_bucket`: training rows per update, `multiple * m * 2**e` with m in 1..8 (under 25% filler).
"""
from __future__ import annotations

from typing import Sequence

# Steps of ~1.25x: at most ~25% padding, and few enough shapes that the jitted update compiles a handful of times.
LENGTH_BUCKETS: tuple[int, ...] = tuple(sorted({b * 2**k for k in range(0, 12) for b in (32, 40, 48, 56)
                                             if b * 2**k <= 65536}))
# Positions the LM head is evaluated at per row group: small sizes too, since a block of verify rows trains on one
# token each.
SCORED_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 24) + LENGTH_BUCKETS
# A shared prompt block's length (prompts are often shorter than the smallest length bucket).
PREFIX_BUCKETS: tuple[int, ...] = (8, 16, 24) + LENGTH_BUCKETS
_ROW_STEPS = (1, 2, 3, 4, 5, 6, 7, 8)


def power_of_two(n: int, minimum: int = 16) -> int:
    """The next power of two >= n, at least `minimum`."""
    b = minimum
    while b < n:
        b *= 2
    return b


def sampler_rows(n: int) -> int:
    """Rows of a sampler batch: a power of two up to 64, then multiples of 64."""
    if n <= 64:
        return power_of_two(n, 1)
    return -(-n // 64) * 64


def length_bucket(n: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> int:
    """The smallest bucket >= n."""
    for size in sorted(buckets):
        if size >= n:
            return int(size)
    raise ValueError(f"sequence length {n} exceeds the largest length bucket {max(buckets)}; pass larger buckets")


def row_bucket(rows: int, multiple: int = 1) -> int:
    """The smallest row count >= `rows` of the form `multiple * m * 2**e` with m in 1..8 (under 25% filler).

    Methods whose row count changes from step to step (RL^V's class-balanced verify rows, DAPO refills) would
    otherwise hand the jitted update a new shape, and a recompilation, almost every step."""
    if rows < 1 or multiple < 1:
        raise ValueError(f"row_bucket: rows and multiple must be >= 1, got {rows}, {multiple}")
    units = -(-rows // multiple)
    scale = 1
    while units > 8 * scale:
        scale *= 2
    m = next(k for k in _ROW_STEPS if k * scale >= units)
    return multiple * m * scale
