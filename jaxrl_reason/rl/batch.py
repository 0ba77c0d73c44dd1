"""TokenBatch: the one tensor layout every task (solve, verify, critique, guided_solve, correct) is trained from.

Shift convention (read this before building masks by hand)
----------------------------------------------------------
Every per-token field is aligned with the **target** token, i.e. with the token whose probability is scored:

    logprobs[b, t]     = log pi(tokens[b, t] | tokens[b, :t])   (computed from logits[b, t - 1])
    loss_mask[b, t]    = 1.0 when tokens[b, t] is trained (a completion / target token); another positive value
                         weighs that token in the loss and its metrics (weighted SFT spans)
    advantages[b, t]   = advantage of emitting tokens[b, t]
    old_logprobs[b, t] = log pi_old(tokens[b, t] | ...), i.e. exactly the per-token log-prob the sampler reports
                         for the completion token it wrote at that slot
    ref_logprobs[b, t] = same under the frozen reference policy

`scoring.next_token_logprobs(logits, tokens)` produces log-probs in this layout (column 0, which has no
predictor, is 0). Keeping the mask on the target means a sampler's completion tokens and their log-probs are
copied into the row verbatim, with no off-by-one bookkeeping in the methods.

Consequences, checked by `validate_token_batch`: the first token of every segment (t = 0 in an unpacked row)
can never be trained, and padding (segment id 0) is never trained.

Packing: `segment_ids` number the sequences of a row 1, 2, ... (0 = padding), `positions` restart at 0 in each
segment, and the model masks attention across segments. Rows built here hold one sequence each; a packer can
put several in a row without changing any loss code, because aggregations count sequences by segment.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Union

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_reason.buckets import LENGTH_BUCKETS, SCORED_BUCKETS, length_bucket, row_bucket

# Task registry: rows carry an int id so one jitted update serves all methods; per-task metrics use the names.
TASKS: dict[str, int] = {"solve": 0, "verify": 1, "critique": 2, "guided_solve": 3, "correct": 4}
# Rows added only to fill a shape (pad_rows_to, concat) belong to no task and never enter any term or metric.
PAD_TASK_ID = -1


Array = Union[np.ndarray, jax.Array]


def register_task(name: str) -> int:
    """Adds a task name to the registry (idempotent) and returns its id.

    Methods declare their tasks (`GRPO.tasks`, registered when the class is defined) and `rl.losses.term_spec`
    registers the tasks it names, so both happen before any update is traced (per-task count vectors are sized by
    the registry at trace time).
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"task name must be a non-empty string without '/', got {name!r}")
    if name not in TASKS:
        TASKS[name] = max(TASKS.values(), default=-1) + 1
    return TASKS[name]


def task_id(task: Union[str, int]) -> int:
    """The id of a task given by name or id; a clear error for names not in `TASKS`."""
    if isinstance(task, (int, np.integer)) and not isinstance(task, bool):
        if int(task) not in TASKS.values():
            raise ValueError(f"task id {task} is not registered; known: {TASKS}")
        return int(task)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known tasks: {sorted(TASKS)} (add one with register_task)")
    return TASKS[task]


def task_name(tid: int) -> str:
    for name, i in TASKS.items():
        if i == tid:
            return name
    raise ValueError(f"task id {tid} is not registered; known: {TASKS}")


class TokenBatch(NamedTuple):
    """Rows of token sequences with everything the loss terms need. A pytree; numpy or jax leaves.

    tokens:       int32   [batch, time]  token ids (padding = pad id, any valid id)
    positions:    int32   [batch, time]  position of each token inside its segment (0 on padding)
    segment_ids:  int32   [batch, time]  1, 2, ... for the sequences packed in a row; 0 = padding
    loss_mask:    float32 [batch, time]  1.0 on trained *target* tokens (see the shift convention above), or
                                         the token's loss weight
    advantages:   float32 [batch, time]  per-token advantage (0 where loss_mask is 0)
    old_logprobs: float32 [batch, time]  sampler log-probs of tokens[b, t] (0 where not sampled)
    ref_logprobs: float32 [batch, time]  reference-policy log-probs, or None when no KL term needs them
    task_id:      int32   [batch]        TASKS id of each row; PAD_TASK_ID (-1) for filler rows
    """

    tokens: Array
    positions: Array
    segment_ids: Array
    loss_mask: Array
    advantages: Array
    old_logprobs: Array
    ref_logprobs: Optional[Array]
    task_id: Array

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])


_TIME_FIELDS = ("tokens", "positions", "segment_ids", "loss_mask", "advantages", "old_logprobs", "ref_logprobs")
_DTYPES = {
    "tokens": np.int32,
    "positions": np.int32,
    "segment_ids": np.int32,
    "loss_mask": np.float32,
    "advantages": np.float32,
    "old_logprobs": np.float32,
    "ref_logprobs": np.float32,
    "task_id": np.int32,
}


def validate_token_batch(batch: TokenBatch) -> TokenBatch:
    """Checks shapes and dtypes (works under jit); with concrete numpy leaves also checks the mask invariants.

    Returns the batch unchanged so it can be used inline.
    """
    if not isinstance(batch, TokenBatch):
        raise TypeError(f"expected a TokenBatch, got {type(batch).__name__}")
    if batch.tokens.ndim != 2:
        raise ValueError(f"TokenBatch.tokens must be [batch, time], got shape {batch.tokens.shape}")
    b, t = batch.tokens.shape
    for name in _TIME_FIELDS:
        x = getattr(batch, name)
        if x is None:
            if name != "ref_logprobs":
                raise ValueError(f"TokenBatch.{name} is None; only ref_logprobs may be None")
            continue
        if tuple(x.shape) != (b, t):
            raise ValueError(f"TokenBatch.{name} has shape {tuple(x.shape)}, expected [batch, time] = {(b, t)}")
        if np.dtype(x.dtype) != np.dtype(_DTYPES[name]):
            raise ValueError(f"TokenBatch.{name} has dtype {x.dtype}, expected {np.dtype(_DTYPES[name])}")
    if tuple(batch.task_id.shape) != (b,):
        raise ValueError(f"TokenBatch.task_id has shape {tuple(batch.task_id.shape)}, expected [batch] = {(b,)}")
    if np.dtype(batch.task_id.dtype) != np.int32:
        raise ValueError(f"TokenBatch.task_id has dtype {batch.task_id.dtype}, expected int32")
    if isinstance(batch.loss_mask, np.ndarray) and isinstance(batch.segment_ids, np.ndarray):
        seg, mask = batch.segment_ids, batch.loss_mask
        if np.any((mask != 0) & (seg == 0)):
            raise ValueError("TokenBatch.loss_mask is non-zero on padding (segment_ids == 0)")
        starts = np.ones_like(seg, dtype=bool)
        starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
        if np.any((mask != 0) & starts):
            raise ValueError(
                "TokenBatch.loss_mask is non-zero on the first token of a segment; the mask sits on target tokens "
                "and a segment's first token has no predictor (every trained row needs a non-empty prompt)"
            )
        if np.any(seg < 0) or np.any(seg > t):
            raise ValueError(f"TokenBatch.segment_ids must lie in [0, time={t}]")
    return batch


def _per_token(value: Any, n: int, field: str, row: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim == 0:
        return np.full((n,), float(arr), np.float32)
    if arr.shape != (n,):
        raise ValueError(
            f"{field}[{row}] has {arr.shape[0] if arr.ndim == 1 else arr.shape} entries but completion {row} has "
            f"{n} tokens; give one value per completion token (or a scalar for {field} where allowed)"
        )
    return arr


def build_token_batch(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    advantages: Union[Sequence[Any], np.ndarray],
    old_logprobs: Optional[Sequence[Sequence[float]]],
    task: Union[str, int, Sequence[Union[str, int]]],
    *,
    ref_logprobs: Optional[Sequence[Sequence[float]]] = None,
    completion_masks: Optional[Sequence[Sequence[float]]] = None,
    length: Optional[int] = None,
    buckets: Sequence[int] = LENGTH_BUCKETS,
    pad_id: int = 0,
) -> TokenBatch:
    """Builds a right-padded, one-sequence-per-row TokenBatch (numpy leaves) on the host.

    Row i is prompts[i] + completions[i]; the completion tokens are the trained targets.

    advantages:       per row, a scalar (broadcast over the completion) or one value per completion token
                      (segment advantages: CURE critiques, VinePPO).
    old_logprobs:     per row, one sampler log-prob per completion token; None gives zeros, which is only right
                      for rows no ratio-based term reads (e.g. SFT verify rows) or when the trainer overwrites them.
    task:             one task (name or id) for all rows, or one per row.
    ref_logprobs:     per row, one per completion token, or None.
    completion_masks: per row, one weight per completion token (default all ones): 0 leaves it untrained (tool
                      output, a forced prefix), another value weighs it in the token-mean loss.
    length:           exact time length; default: the smallest of `buckets` that fits the longest row.
    """
    n = len(prompts)
    if len(completions) != n:
        raise ValueError(f"got {n} prompts but {len(completions)} completions; give one completion per row")
    if len(advantages) != n:
        raise ValueError(f"got {len(advantages)} advantages for {n} rows; give one (scalar or per-token) per row")
    for field, val in (("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs),
                       ("completion_masks", completion_masks)):
        if val is not None and len(val) != n:
            raise ValueError(f"got {len(val)} {field} for {n} rows; give one per row or None")
    if isinstance(task, (str, int, np.integer)):
        tids = [task_id(task)] * n
    else:
        if len(task) != n:
            raise ValueError(f"got {len(task)} tasks for {n} rows; give one task or one per row")
        tids = [task_id(x) for x in task]
    if n == 0:
        raise ValueError("cannot build a TokenBatch with no rows")

    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    for i, p in enumerate(prompts):
        if len(p) == 0 and len(completions[i]) > 0:
            raise ValueError(f"prompts[{i}] is empty; the first completion token needs at least one prompt token")
    T = length_bucket(max(lengths), buckets) if length is None else int(length)
    if max(lengths) > T:
        raise ValueError(f"row {int(np.argmax(lengths))} has {max(lengths)} tokens but length={T}; raise length")

    out = {
        "tokens": np.full((n, T), pad_id, np.int32),
        "positions": np.zeros((n, T), np.int32),
        "segment_ids": np.zeros((n, T), np.int32),
        "loss_mask": np.zeros((n, T), np.float32),
        "advantages": np.zeros((n, T), np.float32),
        "old_logprobs": np.zeros((n, T), np.float32),
    }
    ref = np.zeros((n, T), np.float32) if ref_logprobs is not None else None
    for i, (p, c) in enumerate(zip(prompts, completions)):
        P, C = len(p), len(c)
        out["tokens"][i, :P] = np.asarray(p, np.int32)
        out["tokens"][i, P:P + C] = np.asarray(c, np.int32)
        out["positions"][i, :P + C] = np.arange(P + C, dtype=np.int32)
        out["segment_ids"][i, :P + C] = 1
        m = np.ones((C,), np.float32) if completion_masks is None else _per_token(
            completion_masks[i], C, "completion_masks", i)
        out["loss_mask"][i, P:P + C] = m
        out["advantages"][i, P:P + C] = _per_token(advantages[i], C, "advantages", i) * (m != 0)
        if old_logprobs is not None:
            lp = np.asarray(old_logprobs[i], np.float32)
            if lp.shape != (C,):
                raise ValueError(f"old_logprobs[{i}] has shape {lp.shape}; completion {i} has {C} tokens")
            out["old_logprobs"][i, P:P + C] = lp
        if ref is not None:
            lp = np.asarray(ref_logprobs[i], np.float32)
            if lp.shape != (C,):
                raise ValueError(f"ref_logprobs[{i}] has shape {lp.shape}; completion {i} has {C} tokens")
            ref[i, P:P + C] = lp
    return validate_token_batch(TokenBatch(**out, ref_logprobs=ref, task_id=np.asarray(tids, np.int32)))


def _is_numpy(batch: TokenBatch) -> bool:
    return all(isinstance(x, np.ndarray) for x in jax.tree.leaves(batch))


def pad_time_to(batch: TokenBatch, length: int) -> TokenBatch:
    """Right-pads the time axis with padding tokens (segment 0, mask 0)."""
    t = batch.length
    if length < t:
        raise ValueError(f"pad_time_to: length {length} is shorter than the batch ({t}); it never truncates")
    if length == t:
        return batch
    xp = np if _is_numpy(batch) else jnp
    pad = lambda x: None if x is None else xp.pad(x, ((0, 0), (0, length - t)))
    return batch._replace(**{f: pad(getattr(batch, f)) for f in _TIME_FIELDS})


def pack_rows(batch: TokenBatch, length: Optional[int] = None) -> TokenBatch:
    """Packs a host batch of one-sequence rows into fewer rows of `length` time steps (default: the batch's),
    first-fit by decreasing sequence length; only rows of the same task share a row. Every sequence keeps its
    tokens, positions (restarting at 0), targets, weights and log-probs, now as segment 1, 2, ... of its row, so
    token- and sequence-mean losses are the same sums over the same tokens (the model masks attention across
    segments). What it saves is padding: warm-up rows of a few hundred tokens beside worked solutions of a few
    dozen left half of each padded batch empty. Filler rows (PAD_TASK_ID) are dropped."""
    seg = np.asarray(batch.segment_ids)
    t = seg.shape[1]
    length = t if length is None else int(length)
    lens = (seg != 0).sum(axis=1)
    if np.any(seg > 1) or np.any(seg[np.arange(t)[None, :] >= lens[:, None]] != 0):
        raise ValueError("pack_rows: every row must hold one sequence from its first position (segment_ids 1 then 0)")
    if lens.max(initial=0) > length:
        raise ValueError(f"pack_rows: a {int(lens.max())}-token row does not fit length={length}")
    task = np.asarray(batch.task_id)
    bins: list[list] = []  # [task, used, [row, ...]]
    for i in sorted(np.flatnonzero((task != PAD_TASK_ID) & (lens > 0)), key=lambda i: (-lens[i], i)):
        home = next((x for x in bins if x[0] == task[i] and x[1] + lens[i] <= length), None)
        if home is None:
            home = [task[i], 0, []]
            bins.append(home)
        home[1] += int(lens[i])
        home[2].append(int(i))
    src = {f: np.asarray(getattr(batch, f)) for f in _TIME_FIELDS if getattr(batch, f) is not None}
    out = {f: np.zeros((len(bins), length), _DTYPES[f]) if f in src else None for f in _TIME_FIELDS}
    for r, (_, _, rows) in enumerate(bins):
        at = 0
        for k, i in enumerate(rows, start=1):
            n = int(lens[i])
            for f, x in src.items():
                out[f][r, at:at + n] = x[i, :n]
            out["segment_ids"][r, at:at + n] = k
            at += n
    out["task_id"] = np.asarray([x[0] for x in bins], np.int32)
    return TokenBatch(**out)


def concat_batches(batches: Sequence[TokenBatch]) -> TokenBatch:
    """Stacks rows of several batches; shorter batches are right-padded in time to the longest.

    ref_logprobs must be present in all batches or in none (a KL term would silently skip rows otherwise).
    """
    if not batches:
        raise ValueError("concat_batches needs at least one batch")
    has_ref = [b.ref_logprobs is not None for b in batches]
    if any(has_ref) and not all(has_ref):
        raise ValueError(
            f"concat_batches: ref_logprobs present in batches {[i for i, h in enumerate(has_ref) if h]} only; "
            "compute reference log-probs for all batches or drop them from all"
        )
    T = max(b.length for b in batches)
    padded = [pad_time_to(b, T) for b in batches]
    xp = np if all(_is_numpy(b) for b in padded) else jnp
    return jax.tree.map(lambda *xs: xp.concatenate(xs, axis=0), *padded)


def pad_rows_to(batch: TokenBatch, multiple: int, *, bucket: bool = False) -> TokenBatch:
    """Appends filler rows (task PAD_TASK_ID, all padding) so the row count is a multiple of `multiple` -- with
    `bucket`, the next `row_bucket` size, so that a varying row count reuses a few compiled shapes."""
    if multiple < 1:
        raise ValueError(f"pad_rows_to: multiple must be >= 1, got {multiple}")
    b = batch.batch_size
    extra = (row_bucket(b, multiple) - b) if bucket else (-b) % multiple
    if extra == 0:
        return batch
    xp = np if _is_numpy(batch) else jnp
    out = {}
    for f in TokenBatch._fields:
        x = getattr(batch, f)
        if x is None:
            out[f] = None
            continue
        fill = PAD_TASK_ID if f == "task_id" else 0
        out[f] = xp.concatenate([x, xp.full((extra,) + tuple(x.shape[1:]), fill, x.dtype)], axis=0)
    return TokenBatch(**out)


def scored_size(batch: TokenBatch, micro_batches: int = 1, row_groups: int = 1,
                buckets: Sequence[int] = SCORED_BUCKETS) -> Optional[int]:
    """The `scored` argument of `train.update.make_update`'s update for this (host-side) batch: the trained
    positions of the fullest group of rows, rounded up to a bucket so few shapes compile; None (head at every
    position) when that would not be fewer positions than the group holds.

    Groups are the `micro_batches x row_groups` contiguous row blocks the update splits the rows into."""
    mask = np.asarray(batch.loss_mask) != 0
    b, t = mask.shape
    blocks = micro_batches * row_groups
    if blocks < 1 or b % blocks:
        raise ValueError(f"scored_size: {b} rows do not split into micro_batches x row_groups = {blocks} blocks; "
                         f"call pad_rows_to(batch, {blocks}) first")
    most = int(mask.reshape(blocks, -1).sum(axis=1).max())
    per_group = b // blocks * t
    if most >= per_group:
        return None
    size = next((int(L) for L in sorted(buckets) if L >= max(most, 1)), per_group)
    return size if size < per_group else None


def split_micro_batches(batch: TokenBatch, n: int) -> list[TokenBatch]:
    """Splits rows into `n` equal micro-batches, in order. Rows never straddle micro-batches."""
    b = batch.batch_size
    if n < 1 or b % n:
        raise ValueError(
            f"split_micro_batches: {b} rows do not split into {n} equal micro-batches; "
            f"call pad_rows_to(batch, {n}) first"
        )
    m = b // n
    return [jax.tree.map(lambda x: x[i * m:(i + 1) * m], batch) for i in range(n)]


def split_mini_batches(batch: TokenBatch, n: int, *, rng: Optional[np.random.Generator] = None,
                       multiple: int = 1) -> list[TokenBatch]:
    """The batch's real rows (filler rows dropped) as `n` mini-batches, one optimizer step each (PPO's
    `num_mini_batches`): shuffled by `rng` (None keeps their order), sizes as equal as whole rows allow, each
    padded with filler rows to one `row_bucket(.., multiple)` row count so that all share one compiled shape.
    A host-side (numpy) batch."""
    if n < 1:
        raise ValueError(f"split_mini_batches: n must be >= 1, got {n}")
    real = np.flatnonzero(np.asarray(batch.task_id) != PAD_TASK_ID)
    if len(real) < n:
        raise ValueError(f"split_mini_batches: {len(real)} rows cannot fill {n} mini-batches; lower num_mini_batches")
    order = real if rng is None else rng.permutation(real)
    rows = row_bucket(-(-len(real) // n), multiple)
    out = []
    for part in np.array_split(order, n):
        # In batch order inside a mini-batch, so a group's rows stay adjacent (prefix sharing finds them).
        mb = jax.tree.map(lambda x: np.asarray(x)[np.sort(part)], batch)
        out.append(pad_rows_to(mb, rows) if mb.batch_size < rows else mb)
    return out


def stack_micro_batches(batch: TokenBatch, n: int, groups: int = 1) -> TokenBatch:
    """Reshapes every leaf to [n, batch / n, ...] for a `lax.scan` over micro-batches inside one jit.

    groups: the contiguous row blocks the rows are split into on a mesh (`parallel.mesh.batch_shards`: a device
    holds one block). Micro-batch i takes the i-th slice of every block, so each device keeps computing its own
    rows; taking micro-batch i as the i-th contiguous slice of the whole batch would put it on one device's
    block, and every device would gather and compute every row. With groups=1 the two are the same."""
    b = batch.batch_size
    if n < 1 or groups < 1 or b % (n * groups):
        raise ValueError(
            f"stack_micro_batches: {b} rows do not split into {n} equal micro-batches of {groups} row groups; "
            f"call pad_rows_to(batch, {n * groups}) first"
        )

    def stack(x):
        x = x.reshape((groups, n, b // (groups * n)) + tuple(x.shape[1:]))
        return jnp.swapaxes(x, 0, 1).reshape((n, b // n) + tuple(x.shape[3:]))

    return jax.tree.map(stack, batch)


def unstack_micro_batches(x: jax.Array, groups: int = 1) -> jax.Array:
    """The inverse of `stack_micro_batches` for one per-row array: [n, rows / n, ...] -> [rows, ...] in the batch's
    row order."""
    n, m = x.shape[:2]
    x = x.reshape((n, groups, m // groups) + tuple(x.shape[2:]))
    return jnp.swapaxes(x, 0, 1).reshape((n * m,) + tuple(x.shape[3:]))


def assert_token_batch_shapes(batch: TokenBatch) -> None:
    """chex shape assertions for use at jit boundaries (no value checks)."""
    b, t = batch.tokens.shape
    leaves = [getattr(batch, f) for f in _TIME_FIELDS if getattr(batch, f) is not None]
    chex.assert_shape(leaves, (b, t))
    chex.assert_shape(batch.task_id, (b,))
