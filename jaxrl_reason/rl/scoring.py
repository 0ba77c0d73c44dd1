"""Scoring tokens under given parameters: the one place log pi(token | context) is computed for training.

Used by the fused update (pi_theta), the reference forward (pi_ref), every recomputed pi_old (CURE's replay and
verdict tokens), the verifier's end-of-prompt verdict and the tests. All log-probs are float32 whatever the
model's dtype, and the LM head never materialises more than a `chunk_size` slice of the [B, T, V] logits.

Layout: per-token results follow the TokenBatch shift convention (`rl/batch.py`): position t holds
log pi(tokens[:, t] | tokens[:, :t]). Temperature: rows sampled at T are scored under log-softmax(logits / T),
the tempered policy the sampler drew from (docs/methods/grpo.md#spec-temperature); `rl.losses.scoring_temperatures` says
which tasks.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxrl_reason.buckets import power_of_two
from jaxrl_reason.models.qwen2 import Qwen2, dense, positions_from_mask, split_rows
from jaxrl_reason.parallel.mesh import batch_shards, resolve_mesh, to_host
from jaxrl_reason.parallel.rules import BATCH, shard_batch
from jaxrl_reason.rl.batch import (TASKS, TokenBatch, build_token_batch, pad_rows_to, stack_micro_batches,
                                   unstack_micro_batches)
from jaxrl_reason.rl.prefix import SharedPrefixBatch
from jaxrl_reason.rl.prefix import stack_micro_batches as stack_shared_micro_batches

# ----------------------------------------------------------------------------------------------------------------
# Log-probs and entropy from logits or hidden states (float32 math, optionally chunked over time)


def _logprob_block(logits, targets):
    x = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(x, axis=-1)
    tgt = jnp.take_along_axis(x, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return tgt - lse


def _entropy_block(logits):
    x = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(x, axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _logprob_entropy_block(logits, targets):
    """Both from one log-sum-exp: H = lse - sum(p * x) with p = exp(x - lse), so the vocabulary is exponentiated
    once instead of three times (log-sum-exp, log-softmax, exp). The entropy's gradient is stopped."""
    x = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(x, axis=-1)
    tgt = jnp.take_along_axis(x, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    xs = jax.lax.stop_gradient(x)
    p = jnp.exp(xs - jax.lax.stop_gradient(lse)[..., None])
    entropy = jax.lax.stop_gradient(lse) - jnp.sum(p * xs, axis=-1)
    return tgt - lse, entropy


def _chunked_over_time(block_fn, arrays, chunk_size: Optional[int]):
    """Applies `block_fn(*time_slices) -> [B, c] or tuple` over time chunks of `arrays` (all [B, T, ...]).

    Each chunk is rematerialised in the backward pass (jax.checkpoint), so the float32 [B, chunk, V] softmax is
    the only large temporary, instead of a float32 copy of the whole [B, T, V] logits per saved residual.
    """
    B, T = arrays[0].shape[:2]
    if chunk_size is None or chunk_size >= T:
        return block_fn(*arrays)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
    n_full = T // chunk_size
    body = jax.checkpoint(block_fn)

    def step(_, i):
        start = i * chunk_size
        return None, body(*[jax.lax.dynamic_slice_in_dim(a, start, chunk_size, axis=1) for a in arrays])

    _, out = jax.lax.scan(step, None, jnp.arange(n_full))
    # out leaves: [n_full, B, chunk] -> [B, n_full * chunk]
    merge = lambda o: jnp.moveaxis(o, 0, 1).reshape(B, n_full * chunk_size)
    out = jax.tree.map(merge, out)
    if n_full * chunk_size < T:
        tail = body(*[a[:, n_full * chunk_size:] for a in arrays])
        out = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=1), out, tail)
    return out


def token_logprobs(logits: jax.Array, targets: jax.Array, *, chunk_size: Optional[int] = None) -> jax.Array:
    """log softmax(logits[b, t])[targets[b, t]] in float32, whatever the logits dtype.

    logits: [batch, time, vocab] (bf16 or f32);  targets: int [batch, time]  ->  float32 [batch, time].
    No shift is applied; see `next_token_logprobs` for the TokenBatch layout.
    """
    chex.assert_rank(logits, 3)
    chex.assert_shape(targets, logits.shape[:2])
    return _chunked_over_time(_logprob_block, (logits, targets), chunk_size)


def token_entropy(logits: jax.Array, *, chunk_size: Optional[int] = None) -> jax.Array:
    """Entropy of softmax(logits[b, t]) in float32: [batch, time, vocab] -> [batch, time]. A metric only."""
    chex.assert_rank(logits, 3)
    return _chunked_over_time(_entropy_block, (logits,), chunk_size)


def next_token_targets(tokens: jax.Array) -> jax.Array:
    """targets[:, t] = tokens[:, t + 1] (last column 0): what logits[:, t] predicts."""
    chex.assert_rank(tokens, 2)
    return jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)


def align_to_targets(x: jax.Array) -> jax.Array:
    """Moves a per-*predictor* [B, T] array to the TokenBatch per-*target* layout: out[:, t] = x[:, t - 1]."""
    chex.assert_rank(x, 2)
    return jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], axis=1)


def next_token_logprobs(logits: jax.Array, tokens: jax.Array, *, chunk_size: Optional[int] = None) -> jax.Array:
    """Log-probs in TokenBatch layout: out[:, t] = log p(tokens[:, t] | tokens[:, :t]); out[:, 0] = 0.

    The shift happens on the int targets and the [B, T] result, never on the [B, T, V] logits (no copy).
    Across a packed-segment boundary the value is meaningless, and the loss mask is 0 there by construction.
    """
    return align_to_targets(token_logprobs(logits, next_token_targets(tokens), chunk_size=chunk_size))


def token_logprobs_from_hidden(
    hidden: jax.Array,
    unembedding: jax.Array,
    targets: jax.Array,
    *,
    chunk_size: Optional[int] = None,
    with_entropy: bool = False,
    temperature: Optional[jax.Array] = None,
):
    """Like `token_logprobs`, from final hidden states, without ever holding the full [B, T, V] logits.

    hidden: [batch, time, d_model];  unembedding: [d_model, vocab] (for tied embeddings pass `embedding.T`);
    targets: int [batch, time]. The matmul accumulates in float32. Returns float32 [batch, time] log-probs, and
    the entropy (gradient stopped, a metric) when `with_entropy`.
    temperature: optional float32 [batch, time] (> 0): scores log-softmax(logits / temperature), the tempered
    policy a sampler at that temperature draws from (the convention of docs/methods/grpo.md#spec-temperature, as
    verl's).
    """
    chex.assert_rank(hidden, 3)
    chex.assert_rank(unembedding, 2)
    chex.assert_shape(targets, hidden.shape[:2])
    if unembedding.shape[0] != hidden.shape[-1]:
        raise ValueError(
            f"unembedding has shape {unembedding.shape}; expected [d_model={hidden.shape[-1]}, vocab] "
            "(transpose a [vocab, d_model] embedding table)"
        )

    def block(h, t, *temp):
        logits = dense(h, unembedding, preferred_element_type=jnp.float32)  # 2-D matmul: a faster backward
        if temp:
            logits = logits / temp[0][..., None]
        if with_entropy:
            return _logprob_entropy_block(logits, t)
        return _logprob_block(logits, t)

    arrays = (hidden, targets) if temperature is None else (hidden, targets, temperature.astype(jnp.float32))
    if temperature is not None:
        chex.assert_shape(temperature, hidden.shape[:2])
    return _chunked_over_time(block, arrays, chunk_size)


def selected_token_logprobs_from_hidden(
    hidden: jax.Array,
    unembedding: jax.Array,
    targets: jax.Array,
    selected: jax.Array,
    *,
    size: int,
    groups: int = 1,
    chunk_size: Optional[int] = None,
    with_entropy: bool = False,
    temperature: Optional[jax.Array] = None,
):
    """`token_logprobs_from_hidden` at the `selected` positions only; 0 elsewhere.

    The vocabulary projection is the largest matmul of a small model's step, and most rows train on only part of
    their positions (a verify row on one "Yes"/"No" token after a long prompt; a solve row on its completion), so
    the head runs on the gathered hidden states of the selected positions and its result is scattered back.

    hidden: [batch, time, d_model]; targets, selected (bool): [batch, time]. Rows are split into `groups`
    contiguous groups (one per batch shard on a mesh, so the gather never crosses devices), and `size` is the
    static number of positions gathered per group: it must be >= the number selected in every group. Returns
    (log-probs [batch, time], entropy or None, fits): `fits` is False when some group selected more than `size`
    positions -- the values past `size` are then missing, and callers must refuse the result.
    """
    chex.assert_rank(hidden, 3)
    chex.assert_shape([targets, selected], hidden.shape[:2])
    B, T, D = hidden.shape
    if groups < 1 or B % groups:
        raise ValueError(f"{B} rows do not split into groups={groups}; pad rows to a multiple of {groups}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    n = B // groups * T
    # On a mesh a group is one device's rows: pinning the group axis keeps the gather and scatter local.
    h, t, sel = (split_rows(x) for x in (hidden.reshape(groups, n, D), targets.reshape(groups, n),
                                          selected.reshape(groups, n)))
    # Slots past a group's count hold index n: clipped (harmlessly) when gathering, dropped when scattering back.
    idx = split_rows(jax.vmap(lambda m: jnp.nonzero(m, size=size, fill_value=n)[0])(sel))  # [groups, size]
    fits = jnp.all(jnp.sum(sel, axis=1) <= size)
    read = jnp.minimum(idx, n - 1)
    hs = split_rows(jnp.take_along_axis(h, read[..., None], axis=1))  # [groups, size, D]
    ts = split_rows(jnp.take_along_axis(t, read, axis=1))
    temps = None
    if temperature is not None:
        chex.assert_shape(temperature, (B, T))
        temps = jnp.take_along_axis(temperature.reshape(groups, n), read, axis=1)
    out = token_logprobs_from_hidden(hs, unembedding, ts, chunk_size=chunk_size, with_entropy=with_entropy,
                                     temperature=temps)
    # vmapped over groups, the scatter has the group as a batch axis, which the partitioner keeps on its device
    # (explicit group indices made it gather every group's indices and values everywhere).
    put = jax.vmap(lambda i, v: jnp.zeros((n,), v.dtype).at[i].set(v, mode="drop"))

    def scatter(v):
        return split_rows(put(idx, v)).reshape(B, T)

    if with_entropy:
        lp, ent = out
        return scatter(lp), scatter(ent), fits
    return scatter(out), None, fits


# ----------------------------------------------------------------------------------------------------------------
# Per-row temperatures


def row_temperatures(task_ids: jax.Array, temperatures: Optional[Sequence[float]]) -> Optional[jax.Array]:
    """float32 [B]: each row's scoring temperature from its task id (filler rows: 1). None when all are 1."""
    if temperatures is None or all(t == 1.0 for t in temperatures):
        return None
    table = jnp.asarray(temperatures, jnp.float32)
    ids = jnp.asarray(task_ids, jnp.int32)
    return jnp.where((ids >= 0) & (ids < table.shape[0]), table[jnp.clip(ids, 0, table.shape[0] - 1)], 1.0)


# ----------------------------------------------------------------------------------------------------------------
# A model over a TokenBatch


def model_logprobs(graphdef, params, batch: TokenBatch | SharedPrefixBatch, *, chunk_size: Optional[int] = None,
                   scored: Optional[int] = None, row_groups: int = 1,
                   temperature: float | tuple[float, ...] = 1.0, value_tasks: Optional[tuple[int, ...]] = None,
                   dropout_key=None):
    """Per-token log-probs and entropy in TokenBatch layout, from final hidden states, never materialising more
    than a `chunk_size` slice of the [B, T, V] logits. Returns (log-probs, entropy, fits), and with `value_tasks`
    (log-probs, entropy, fits, values).

    scored: None runs the LM head at every position; an int runs it only at the positions whose target is trained
    (loss_mask != 0), at most `scored` of them per group of `row_groups` contiguous row blocks (see
    `rl.batch.scored_size`); the other positions read 0, which no loss term looks at. `fits` is False when a group
    had more trained positions than `scored`. For a `SharedPrefixBatch` the layout is that of `batch.rows`.
    temperature: a float for every row, or one per task id (`rl.losses.scoring_temperatures`): log-probs are
    log-softmax(logits / T), the tempered policy the rows were sampled from.
    value_tasks: the task ids of value rows (PPO's critic targets, `rl.losses.value_task_ids`), or None: the model's
    value head runs on the same final hidden states, or its separate critic on the same tokens (`model_values`;
    [B, T] values in TokenBatch layout: V(s_t) of the state that emits target t sits where its log-prob does),
    and the LM head skips the value rows' positions.
    dropout_key: the training forward's key for a LoRA policy's adapter dropout (`models.qwen2.Linear.adapter`);
    None scores without dropout (pi_old, the reference, evaluation)."""
    model = nnx.merge(graphdef, params)
    given = batch
    if isinstance(batch, SharedPrefixBatch):
        h, batch = _shared_prefix_hidden(model, batch, dropout_key), batch.rows
    else:
        h, _ = model.hidden_states(batch.tokens, batch.positions, batch.segment_ids, dropout_key=dropout_key)
    trained = batch.loss_mask != 0
    if value_tasks is not None:
        values = align_to_targets(model_values(model, given, h))
        trained = trained & ~jnp.isin(batch.task_id, jnp.asarray(value_tasks, jnp.int32))[:, None]
    if model.lm_head is None:
        w = model.embed_tokens.weight[...].astype(h.dtype).T
    else:
        w = model.lm_head.kernel[...].astype(h.dtype)
    targets = next_token_targets(batch.tokens)
    table = (temperature,) * len(TASKS) if isinstance(temperature, (int, float)) else temperature
    row_t = row_temperatures(batch.task_id, table)
    # A predictor at t - 1 scores the target at t, in the same row: the row's temperature covers both.
    temp = None if row_t is None else jnp.broadcast_to(row_t[:, None], targets.shape)
    if scored is None:
        lp, ent = token_logprobs_from_hidden(h, w, targets, chunk_size=chunk_size, with_entropy=True,
                                             temperature=temp)
        fits = jnp.array(True)
    else:
        # the predictor of target t sits at t - 1
        predicts_trained = next_token_targets(trained.astype(jnp.int32)) != 0
        lp, ent, fits = selected_token_logprobs_from_hidden(h, w, targets, predicts_trained, size=scored,
                                                            groups=row_groups, chunk_size=chunk_size,
                                                            with_entropy=True, temperature=temp)
    out = (align_to_targets(lp), align_to_targets(ent), fits)
    return out if value_tasks is None else out + (values,)


def model_values(model, batch: TokenBatch | SharedPrefixBatch, h: Optional[jax.Array] = None) -> jax.Array:
    """float32 [B, T] per-position values V (not yet aligned to targets) of `batch` (`batch.rows`' layout for a
    SharedPrefixBatch): the value head on the policy's final hidden states `h` (computed when None), or, for a
    model with a separate critic, the critic's own forward over the same tokens (its gradient reaches only the
    critic's params)."""
    source = getattr(model, "value_source", None)
    if source is None:
        raise ValueError("this model has no critic: attach one with models.qwen2.attach_value_head(model) (a head on "
                         "the policy's trunk) or models.qwen2.attach_critic(model) (a separate critic model)")
    if source == "separate":
        model, h = model.critic, None
    if h is None:
        if isinstance(batch, SharedPrefixBatch):
            h = _shared_prefix_hidden(model, batch)
        else:
            h, _ = model.hidden_states(batch.tokens, batch.positions, batch.segment_ids)
    return model.values_from_hidden(h)


def _shared_prefix_hidden(model, batch: SharedPrefixBatch, dropout_key=None):
    """Hidden states [rows, 1 + suffix_time, H] of `batch.rows`; column 0's is its prefix's last one."""
    rows = batch.rows
    h_prefix, h_suffix = model.shared_prefix_hidden_states(
        batch.prefix_tokens, batch.prefix_positions, batch.prefix_valid, batch.prefix_index,
        rows.tokens[:, 1:], rows.positions[:, 1:], rows.segment_ids[:, 1:] != 0, dropout_key=dropout_key)
    last = jnp.maximum(batch.prefix_valid.sum(axis=-1) - 1, 0)[batch.prefix_index]
    return jnp.concatenate([h_prefix[batch.prefix_index, last][:, None], h_suffix], axis=1)


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk_size", "scored", "temperature", "row_groups"))
def reference_logprobs(graphdef, params, batch: TokenBatch | SharedPrefixBatch, chunk_size: Optional[int] = None,
                       scored: Optional[int] = None, temperature: float | tuple[float, ...] = 1.0,
                       row_groups: int = 1):
    """log-probs of the batch's tokens under frozen `params` (TokenBatch layout; `batch.rows`' for a
    SharedPrefixBatch), for the KL term or a recomputed pi_old. scored: as in `make_update` -- the LM head only at
    trained positions (0 elsewhere); an undersized `scored` gives NaN everywhere, which the update then refuses as
    a non-finite KL. temperature, row_groups: as in `model_logprobs` (the update's `scoring_temperatures` for the
    KL; the mesh's batch shards)."""
    lp, _, fits = model_logprobs(graphdef, params, batch, chunk_size=chunk_size, scored=scored,
                                 row_groups=row_groups, temperature=temperature)
    return jnp.where(fits, lp, jnp.nan)


def reference_scorer(graphdef, mesh: Mesh, *, chunk_size: Optional[int] = None,
                     temperature: float | tuple[float, ...] = 1.0, micro_batches: int = 1) -> Callable:
    """`reference_logprobs` compiled for `mesh`: `score(params, batch, scored)` with `batch` split by rows over the
    mesh's batch shards (each shard gathering its own scored positions, as the update does), traced under the
    mesh so the model keeps every row on its device, and the log-probs returned in the same row layout, ready to
    sit in the batch the update takes. `score.lower(...)` lowers it the same way.

    micro_batches: the update's. The rows are scored one micro-batch at a time, in the update's micro-batch layout
    (`rl.batch.stack_micro_batches`): `scored` is the update's, sized for one micro-batch's row group, and the
    forward's activations are a micro-batch's, not the whole batch's (a 7B CURE step's pi_old forward over its
    whole batch needed 77 of an H100's 80 GiB)."""
    groups = batch_shards(mesh)

    def score_rows(p, b, scored):
        kw = dict(chunk_size=chunk_size, scored=scored, temperature=temperature)
        if micro_batches == 1:
            return reference_logprobs(graphdef, p, b, row_groups=groups, **kw)
        if isinstance(b, SharedPrefixBatch):  # shared prompts: rows are not split over devices (one group)
            lp = jax.lax.map(lambda mb: reference_logprobs(graphdef, p, mb, **kw),
                             stack_shared_micro_batches(b, micro_batches))
            return lp.reshape((-1,) + lp.shape[2:])
        lp = jax.lax.map(lambda mb: reference_logprobs(graphdef, p, mb, row_groups=groups, **kw),
                         stack_micro_batches(b, micro_batches, groups))
        return unstack_micro_batches(lp, groups)

    jitted = jax.jit(score_rows, out_shardings=NamedSharding(mesh, P(BATCH)), static_argnums=(2,))

    def score(params, batch, scored=None):
        with jax.set_mesh(mesh):
            return jitted(params, batch, scored)

    def lower(params, batch, scored=None):
        with jax.set_mesh(mesh):
            return jitted.lower(params, batch, scored)

    score.lower = lower
    return score


def rows_on_mesh(batch, state, rows: int):
    """(`batch` padded to `rows` rows, or the next multiple of the batch shards of the mesh `state` lives on, and
    split by rows over it; that mesh): a scoring call's rows divide over the devices instead of every device
    scoring every row."""
    mesh = resolve_mesh(None, like=state)
    shards = batch_shards(mesh)
    rows = -(-rows // shards) * shards
    if isinstance(batch, TokenBatch):
        batch = pad_rows_to(batch, rows)
    return shard_batch(batch, mesh), mesh


def completion_logprobs(model, params, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *,
                        temperature: float = 1.0, pad_id: int = 0, rows_per_call: int = 16,
                        chunk_size: Optional[int] = None) -> list:
    """log pi_T(completion token | prompt, earlier completion tokens) per row: float32 [len(completion)] each.

    One forward pass per `rows_per_call` rows (filler rows keep one compiled shape). `params` (nnx.State) is the
    policy to score under -- pass the trainer's current params, the module's own weights may be stale; None uses
    the module's. temperature: the sampling temperature of the rows (a recomputed pi_old must be the tempered
    policy's, as the sampler's own log-probs are).
    """
    if len(prompts) != len(completions):
        raise ValueError(f"completion_logprobs got {len(prompts)} prompts and {len(completions)} completions")
    if rows_per_call < 1:
        raise ValueError(f"completion_logprobs: rows_per_call must be >= 1, got {rows_per_call}")
    if not prompts:
        return []
    graphdef, own = nnx.split(model)
    params = own if params is None else params
    out = []
    for s in range(0, len(prompts), rows_per_call):
        p, c = prompts[s:s + rows_per_call], completions[s:s + rows_per_call]
        batch, mesh = rows_on_mesh(build_token_batch(p, c, [0.0] * len(p), None, "solve", pad_id=pad_id), params,
                                   rows_per_call)
        with jax.set_mesh(mesh):
            lp = to_host(reference_logprobs(graphdef, params, batch, chunk_size=chunk_size,
                                            temperature=float(temperature)))
        out.extend(lp[i, len(pi):len(pi) + len(ci)].astype(np.float32) for i, (pi, ci) in enumerate(zip(p, c)))
    return out


# ----------------------------------------------------------------------------------------------------------------
# The next token after a prompt (the verifier's verdict)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _end_logprobs(graphdef, state, tokens, lengths, ids):
    """tokens [B, L] left-padded, lengths [B], ids [K] -> log pi(ids | prompt) as [B, K] (float32).

    Left padding puts every prompt's last token in column L-1, so only that column goes through the LM head
    (a [B, V] matmul instead of [B, L, V])."""
    model: Qwen2 = nnx.merge(graphdef, state)
    b, l = tokens.shape
    mask = (jnp.arange(l)[None, :] >= (l - lengths)[:, None]).astype(jnp.int32)
    h, _ = model.hidden_states(tokens, positions_from_mask(mask), mask)
    logits = model.logits_from_hidden(h[:, -1, :])
    chex.assert_shape(logits, (b, model.config.vocab_size))
    return jnp.take(jax.nn.log_softmax(logits, axis=-1), ids, axis=-1)


def _batch_rows(n: int, batch_size: int) -> int:
    """Rows per compiled batch: `batch_size`, or the next power of two >= n when everything fits in one batch,
    so a small call does not pay for a full batch but still reuses a few shapes."""
    return min(batch_size, power_of_two(n, 1))


def token_logprobs_at_end(model: Qwen2, prompts: Sequence[Sequence[int]], token_ids: Sequence[int], *,
                          batch_size: int = 32, pad_id: int = 0, state=None, max_length: Optional[int] = None,
                          progress: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
    """log pi(t | prompt) for each prompt and each t in `token_ids`: float32 [N, len(token_ids)].

    Batches are sorted by length (less padding) and padded to a power-of-two width and a fixed row count, so
    repeated calls reuse a handful of compiled shapes. A row's value does not depend on its batch mates
    (padding is masked out of attention). `progress(done, total)` is called after each batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(prompts)
    limit = model.config.max_position_embeddings if max_length is None else int(max_length)
    lengths = np.array([len(p) for p in prompts], np.int64)
    for i, m in enumerate(lengths):
        if m == 0:
            raise ValueError(f"verifier input {i} has no tokens; every prompt needs at least one token")
        if m > limit:
            raise ValueError(f"verifier input {i} has {m} tokens, more than the limit of {limit} "
                             f"({'max_length' if max_length is not None else 'the model context'}); shorten its "
                             "solution (e.g. a lower max_new_tokens when sampling) or raise the limit")
    ids = jnp.asarray(np.asarray(token_ids, np.int32))
    out = np.zeros((n, len(token_ids)), np.float32)
    if n == 0:
        return out
    graphdef, own = nnx.split(model)
    state = own if state is None else state
    mesh = resolve_mesh(None, like=state)
    shards = batch_shards(mesh)
    rows = -(-_batch_rows(n, batch_size) // shards) * shards  # rows split over the mesh's batch shards
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, n, rows):
        chunk = order[start:start + rows]
        width = min(power_of_two(int(lengths[chunk].max())), max(limit, 1))
        tokens = np.full((rows, width), pad_id, np.int32)
        lens = np.ones((rows,), np.int32)  # filler rows: one pad token, discarded
        for r, i in enumerate(chunk):
            tokens[r, width - lengths[i]:] = prompts[i]
            lens[r] = lengths[i]
        placed, _ = rows_on_mesh((tokens, lens), state, rows)
        with jax.set_mesh(mesh):
            lp = _end_logprobs(graphdef, state, *placed, ids)
        out[chunk] = to_host(lp)[:len(chunk)]
        if progress is not None:
            progress(min(start + rows, n), n)
    return out
