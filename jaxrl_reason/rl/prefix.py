"""Shared prompts: a TokenBatch re-laid so that every prompt shared by several rows goes through the model once.

A GRPO step trains G samples of each of Q prompts, so the plain TokenBatch pushes every prompt's tokens through
every matmul G times, forward and backward, to get the same keys and values each time. `share_prefixes` stores
each distinct prompt once (`prefix_*`, [prefixes, prefix_time]) and keeps of each row only its continuation
(`rows`, a TokenBatch [rows, 1 + suffix_time]); `Qwen2.shared_prefix_hidden_states` runs both as one token
stream in which row r's continuation attends to prefix `prefix_index[r]`. The loss terms see `rows` and need no
change: its per-token fields are the original row's, shifted left.

Layout of `rows`, for a row whose first trained target sits at column t0 of the original batch:

    original  tokens[r]:  p_0 ... p_{t0-2} p_{t0-1} | y_0 y_1 ... y_{n-1} | padding
    prefix    (shared):   p_0 ... p_{t0-2} p_{t0-1}
    rows      tokens[r]:                   p_{t0-1} | y_0 y_1 ... y_{n-1} | padding

Column 0 repeats the prompt's last token: its hidden state (the one that predicts y_0) is the prefix's last
one, gathered, not recomputed. Columns 1.. are the continuation, with their original positions.

Numbers (`python experiments/bench/train_step.py`, 8 prompts x 8 samples, 16-token prompts, 64 new tokens): the
update's forward and backward run on 8 x 16 + 64 x 64 = 4,224 tokens instead of 64 x 80 = 5,120.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_reason.buckets import PREFIX_BUCKETS, length_bucket, row_bucket
from jaxrl_reason.rl.batch import _TIME_FIELDS, TokenBatch

# Prompts and continuations are often short; steps of 8 below the TokenBatch buckets keep the padding small.


class SharedPrefixBatch(NamedTuple):
    """A TokenBatch whose rows continue shared prefixes. A pytree of numpy or jax leaves.

    prefix_tokens:    int32 [prefixes, prefix_time]  distinct prompts, right-padded
    prefix_positions: int32 [prefixes, prefix_time]  0, 1, ... (0 on padding)
    prefix_valid:     bool  [prefixes, prefix_time]  True on real tokens
    prefix_index:     int32 [rows]  the prefix row r continues
    rows:             TokenBatch [rows, 1 + suffix_time]  see the module docstring

    With `micro_batches` = M, rows and prefixes each split into M equal contiguous blocks and block m's rows read
    only block m's prefixes, so a micro-batch is the m-th block of every leaf (`stack_micro_batches`); a prompt
    whose rows straddle two blocks is stored in both.
    """

    prefix_tokens: np.ndarray
    prefix_positions: np.ndarray
    prefix_valid: np.ndarray
    prefix_index: np.ndarray
    rows: TokenBatch

    @property
    def batch_size(self) -> int:
        return self.rows.batch_size

    def tokens_through_model(self) -> int:
        """Tokens the forward runs on (prefix slots + continuation slots, padding included)."""
        return int(self.prefix_tokens.size + self.rows.tokens.shape[0] * (self.rows.tokens.shape[1] - 1))


def _row_split(batch: TokenBatch, r: int) -> Optional[tuple[int, int]]:
    """(t0, n): first trained column and length of row r; None for a row that trains nothing. Raises
    `_Unshareable` for rows this layout cannot express."""
    seg = np.asarray(batch.segment_ids[r])
    n = int(np.count_nonzero(seg))
    if np.any(seg[:n] != 1) or np.any(seg[n:] != 0):
        raise _Unshareable("packed or left-padded rows")
    if np.any(np.asarray(batch.positions[r, :n]) != np.arange(n)):
        raise _Unshareable("positions that do not count 0, 1, ...")
    trained = np.flatnonzero(np.asarray(batch.loss_mask[r]))
    if trained.size == 0:
        return None
    return int(trained[0]), n


class _Unshareable(Exception):
    pass


def share_prefixes(batch: TokenBatch, micro_batches: int = 1, *, min_saving: float = 0.05,
                   buckets: Sequence[int] = PREFIX_BUCKETS) -> Optional[SharedPrefixBatch]:
    """The shared-prefix layout of a host-side (numpy) batch, or None where it would not pay.

    Rows share a prefix when their tokens up to their first trained target are identical. Returns None when the
    layout would not cut the tokens through the model by at least `min_saving` (e.g. RL^V verify rows, each with
    its own prompt), or when a row is packed (several segments) -- the plain batch is then the right input.
    Rows that train nothing (filler rows) keep no tokens. `micro_batches` as in `make_update`."""
    b, t = batch.tokens.shape
    if micro_batches < 1 or b % micro_batches:
        raise ValueError(f"share_prefixes: {b} rows do not split into micro_batches={micro_batches}; "
                         f"call pad_rows_to(batch, {micro_batches}) first")
    try:
        splits = [_row_split(batch, r) for r in range(b)]
    except _Unshareable:
        return None
    tokens = np.asarray(batch.tokens)
    block = b // micro_batches
    index = np.zeros((b,), np.int32)
    blocks: list[list[np.ndarray]] = []
    for m in range(micro_batches):
        seen: dict[bytes, int] = {}
        prompts: list[np.ndarray] = []
        for r in range(m * block, (m + 1) * block):
            if splits[r] is None:
                continue
            p = tokens[r, :splits[r][0]]
            key = p.tobytes()
            if key not in seen:
                seen[key] = len(prompts)
                prompts.append(p)
            index[r] = seen[key]
        blocks.append(prompts)
    trained = [s for s in splits if s is not None]
    if not trained:
        return None
    lp = length_bucket(max(t0 for t0, _ in trained), buckets)
    ls = length_bucket(max(max(n - t0 for t0, n in trained), 1), buckets)
    n_prefix = row_bucket(max(max(len(p) for p in blocks), 1))
    if n_prefix * micro_batches * lp + b * ls > (1.0 - min_saving) * b * t:
        return None
    index += np.repeat(np.arange(micro_batches, dtype=np.int32) * n_prefix, block)

    pre_tok = np.zeros((micro_batches * n_prefix, lp), np.int32)
    pre_valid = np.zeros((micro_batches * n_prefix, lp), bool)
    for m, prompts in enumerate(blocks):
        for i, p in enumerate(prompts):
            pre_tok[m * n_prefix + i, :len(p)] = p
            pre_valid[m * n_prefix + i, :len(p)] = True
    pre_pos = np.where(pre_valid, np.arange(lp, dtype=np.int32)[None], 0).astype(np.int32)

    rows = {f: None if getattr(batch, f) is None else np.zeros((b, 1 + ls), getattr(batch, f).dtype)
            for f in _TIME_FIELDS}
    for r, s in enumerate(splits):
        if s is None:
            continue
        t0, n = s
        for f, out in rows.items():
            if out is not None:
                out[r, :n - t0 + 1] = np.asarray(getattr(batch, f)[r, t0 - 1:n])
    return SharedPrefixBatch(pre_tok, pre_pos, pre_valid, index,
                             TokenBatch(**rows, task_id=np.asarray(batch.task_id, np.int32)))


def stack_micro_batches(batch: SharedPrefixBatch, n: int) -> SharedPrefixBatch:
    """Every leaf reshaped to [n, leading / n, ...]: micro-batch m is block m of the prefixes and of the rows,
    with `prefix_index` counted inside its block."""
    stacked = jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n) + tuple(x.shape[1:])), batch)
    per_block = batch.prefix_tokens.shape[0] // n
    offsets = (jnp.arange(n, dtype=jnp.int32) * per_block)[:, None]
    return stacked._replace(prefix_index=stacked.prefix_index - offsets)
