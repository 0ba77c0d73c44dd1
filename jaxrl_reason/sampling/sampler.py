"""A pure, jit-compiled sampler: one prefill per prompt, then a `lax.while_loop` of single-token decode steps.

Layout: prompts are LEFT-padded to a bucketed length L, so every row writes the same cache slot at each
step (L, L+1, ...) while its RoPE position is its own (prompt length + step). The `num_samples` rows of one
prompt share its prefill: the prompt's cache is computed once and repeated. Rows are prompt-major
(row = prompt * num_samples + sample).

The log-probabilities returned are computed from the very logits the token was drawn from, under the tempered
policy softmax(logits / temperature), so they equal a fresh forward pass over the sampled sequence scored at the
same temperature up to float rounding: the trainer's `pi_old` *is* the sampler's
(docs/methods/grpo.md#spec-temperature).
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax.sharding import NamedSharding, PartitionSpec as P

from jaxrl_reason.buckets import power_of_two, sampler_rows
from jaxrl_reason.models.qwen2 import KVCache, Qwen2, decode_layers, decode_step, positions_from_mask
from jaxrl_reason.parallel.mesh import batch_shards, resolve_mesh, to_host
from jaxrl_reason.parallel.rules import BATCH, as_sharded, kv_cache_shardings
from jaxrl_reason.sampling.logits import sample_with_uniform

FINISH_EOS, FINISH_STOP, FINISH_LENGTH = 0, 1, 2
FINISH_NAMES = ("eos", "stop", "length")
MAX_STOP_IDS = 8  # stop ids are a traced, fixed-size array so a different set does not recompile


class SampleOutput(NamedTuple):
    """Rows are prompt-major: row r comes from prompt r // num_samples.

    tokens:            [N, max_new_tokens] int32, `pad_id` after the end of each completion
    logprobs:          [N, max_new_tokens] float32, log pi_T(token), the tempered untruncated policy (T = 1 when
                       greedy; 0 after the end)
    sampling_logprobs: [N, max_new_tokens] float32, log q(token) of the sampling distribution (0 if greedy)
    lengths:           [N] int32, generated tokens including a stop token / stop string
    finish_reason:     [N] int32 in FINISH_EOS / FINISH_STOP / FINISH_LENGTH (names in FINISH_NAMES)
    prompt_index:      [N] int32
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    sampling_logprobs: np.ndarray
    lengths: np.ndarray
    finish_reason: np.ndarray
    prompt_index: np.ndarray

    def completions(self) -> list:
        return [self.tokens[i, :n].tolist() for i, n in enumerate(self.lengths)]

    def finish_names(self) -> list:
        return [FINISH_NAMES[int(f)] for f in self.finish_reason]


class DecodeCarry(NamedTuple):
    cache: KVCache
    hidden: jax.Array  # [N, H] final-norm hidden state of the last token (its logits are the next step's)
    tokens: jax.Array
    logprobs: jax.Array
    sampling_logprobs: jax.Array
    done: jax.Array  # [N] bool
    finish: jax.Array
    lengths: jax.Array
    positions: jax.Array  # [N] position id of the next token
    step: jax.Array  # [] int32
    key: jax.Array  # the call's key; step t draws from a table made from it (same draws however decode is chunked)


@functools.partial(jax.jit, static_argnames=("graphdef", "num_samples", "max_new_tokens", "mesh"))
def prefill(graphdef, state, tokens, lengths, *, num_samples: int, max_new_tokens: int, mesh=None):
    """tokens: [B, L] left-padded; lengths: [B]. Returns (cache for B*num_samples rows, last hidden [B*G, H]).
    The carry holds hidden states, not [rows, vocab] logits, so the decode loop never copies a vocab-sized
    buffer (at a 150k vocabulary that is tens of MB per step).
    With a `mesh` the cache is pinned to its rows x kv-heads layout (`parallel.rules.kv_cache_shardings`)."""
    model: Qwen2 = nnx.merge(graphdef, state)
    b, l = tokens.shape
    mask = (jnp.arange(l)[None, :] >= (l - lengths)[:, None]).astype(jnp.int32)
    # The prompt attends over its own L slots only; the cache grows to its decode size afterwards (attending over
    # all L + max_new slots, most of them empty, made the prefill twice its matmuls' time at 64 x 64 tokens).
    h, cache = model.hidden_states(tokens, positions_from_mask(mask), mask, cache=KVCache.zeros(model.config, b, l))
    cache = cache.grow(max_new_tokens)
    last = h[:, -1, :]
    if num_samples > 1:
        cache = cache.repeat(num_samples)
        last = jnp.repeat(last, num_samples, axis=0)
    if mesh is not None:
        cache = _pin_cache(cache, mesh)
    return cache, last


WINDOW_ALIGN = 128  # attention windows end on a multiple of this many slots (a TPU vector's lanes)
# decode's loops on an accelerator (`decode_windows`); on CPU one loop over every slot (see `decode`).
WINDOW_PHASES = 4


def decode_windows(slots: int, max_new: int, phases: int) -> list[tuple[int, int, Optional[int]]]:
    """(first step, end step, attention window) of each phase of a decode over a cache of `slots` slots whose last
    `max_new` are written by the steps: `phases` equal runs of steps, each attending over the slots written by its
    last step (rounded up to WINDOW_ALIGN), the last phase over all of them (window None). Phases whose window
    would reach the end of the cache anyway merge into the last."""
    prompt = slots - max_new
    out, start = [], 0
    for j in range(1, max(1, phases)):
        stop = -(-j * max_new // phases)
        window = -(-(prompt + stop) // WINDOW_ALIGN) * WINDOW_ALIGN
        if window >= slots:
            break
        if stop > start:
            out.append((start, stop, window))
            start = stop
    return out + [(start, max_new, None)]


@functools.partial(jax.jit, static_argnames=("graphdef", "mesh", "window_phases", "uniform_rows"),
                   donate_argnames=("carry",))
def decode(graphdef, state, carry: DecodeCarry, end_step, temperature, top_p, top_k, stop_ids, pad_id, mesh=None,
           window_phases: Optional[int] = None, uniform_rows: Optional[int] = None, row_offset=None):
    """Run decode steps until `end_step` or until every row is done. The carry (KV cache included) is donated:
    XLA updates it in place instead of copying it each call.

    window_phases: the steps run as this many loops (`decode_windows`), each attending over a window of the cache
    that ends just past the slots its steps write: the empty slots after it are masked, so the tokens and
    log-probs are those of one loop over every slot (1) up to the order of the softmax and value sums over a
    shorter axis (tokens identical, log-probs within an ulp on CPU), and the KV bytes read per step fall from the
    whole cache towards the written part (at 512 prompt + 4,096 new slots: from 1.8x the valid slots to 1.2x),
    for one compiled loop body per phase. None: WINDOW_PHASES on the mesh's accelerator, 1 on CPU, where a
    decode step costs its operations more than its bytes and the outputs stay bitwise those of earlier releases.

    uniform_rows, row_offset: these rows are rows row_offset.. of a batch of `uniform_rows` (`sample`'s
    prompts_per_call): they draw that batch's uniforms, so a batch sampled in row chunks samples what it samples
    whole. None: the carry's own rows are the batch."""
    model: Qwen2 = nnx.merge(graphdef, state)
    n, max_new = carry.tokens.shape
    if window_phases is None:
        platform = mesh.devices.flat[0].platform if mesh is not None else jax.default_backend()
        window_phases = 1 if platform == "cpu" else WINDOW_PHASES
    layers = decode_layers(model)  # sliced and fused once here, not once per step inside the loop
    # One uniform per (step, row), indexed by the absolute step: a chunked run draws what a single call draws.
    if uniform_rows is None:
        uniforms = 1.0 - jax.random.uniform(carry.key, (max_new, n), jnp.float32)  # (0, 1]
    else:  # the whole batch's table; a last chunk's filler rows may reach past it (they are done: any value)
        table = 1.0 - jax.random.uniform(carry.key, (max_new, uniform_rows), jnp.float32)
        uniforms = jax.lax.dynamic_slice_in_dim(jnp.pad(table, ((0, 0), (0, n)), constant_values=1.0), row_offset,
                                                n, axis=1)

    def body(c: DecodeCarry, window: Optional[int]):
        logits = model.logits_from_hidden(c.hidden)
        s = sample_with_uniform(logits, uniforms[c.step], temperature, top_p, top_k)
        live = ~c.done
        tok = jnp.where(live, s.token, pad_id)
        put = lambda buf, x: jax.lax.dynamic_update_slice_in_dim(buf, x[:, None], c.step, axis=1)
        tokens = put(c.tokens, tok)
        logprobs = put(c.logprobs, jnp.where(live, s.logprob, 0.0))
        sampling_logprobs = put(c.sampling_logprobs, jnp.where(live, s.sampling_logprob, 0.0))
        lengths = jnp.where(live, c.step + 1, c.lengths)
        hit = live & jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)
        finish = jnp.where(hit, FINISH_EOS, c.finish)
        out_of_room = live & ~hit & (c.step + 1 >= max_new)
        finish = jnp.where(out_of_room, FINISH_LENGTH, finish)
        done = c.done | hit | out_of_room
        hidden, cache = decode_step(model, layers, tok, c.positions, live, c.cache, window=window)
        if mesh is not None:  # keep the loop's cache in its layout instead of whatever propagation picks
            cache = _pin_cache(cache, mesh)
        return DecodeCarry(cache, hidden, tokens, logprobs, sampling_logprobs, done, finish, lengths,
                      c.positions + 1, c.step + 1, c.key)

    # A phase whose steps are all before carry.step (a chunked call resuming) or at/after end_step runs none.
    for _, stop, window in decode_windows(carry.cache.valid.shape[1], max_new, window_phases):
        last = jnp.minimum(end_step, stop)
        carry = jax.lax.while_loop(lambda c, last=last: (c.step < last) & ~jnp.all(c.done),
                                   functools.partial(body, window=window), carry)
    return carry


def as_prompt_batch(prompts, pad_id: int, max_context: int, max_new_tokens: int):
    """Accept ragged token lists, or a (tokens [B, L] left-padded, lengths [B]) pair."""
    if isinstance(prompts, tuple) and len(prompts) == 2 and np.ndim(prompts[0]) == 2:
        tokens, lengths = np.asarray(prompts[0]), np.asarray(prompts[1])
        ragged = [tokens[i, tokens.shape[1] - n:].tolist() for i, n in enumerate(lengths)]
    elif hasattr(prompts, "tokens") and hasattr(prompts, "lengths"):
        tokens, lengths = np.asarray(prompts.tokens), np.asarray(prompts.lengths)
        ragged = [tokens[i, tokens.shape[1] - n:].tolist() for i, n in enumerate(lengths)]
    else:
        ragged = [list(map(int, p)) for p in prompts]
    if not ragged:
        raise ValueError("sample(): `prompts` is empty; pass at least one prompt (a list of token ids)")
    for i, p in enumerate(ragged):
        if len(p) == 0:
            raise ValueError(f"sample(): prompt {i} has no tokens; every prompt needs at least one token")
        if len(p) + max_new_tokens > max_context:
            raise ValueError(
                f"sample(): prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} that exceeds the "
                f"model context of {max_context} positions. Shorten the prompt or lower max_new_tokens.")
    b = sampler_rows(len(ragged))
    l = power_of_two(max(len(p) for p in ragged))
    tokens = np.full((b, l), pad_id, np.int32)
    lengths = np.ones((b,), np.int32)  # filler rows: one pad token, discarded afterwards
    for i, p in enumerate(ragged):
        tokens[i, l - len(p):] = p
        lengths[i] = len(p)
    return tokens, lengths, len(ragged)


def cut_at_stop_strings(tokens: np.ndarray, lengths: np.ndarray, stop_strings: Sequence[str], decode_fn):
    """For each row, the smallest prefix length whose text contains a stop string, or None."""
    cuts = []
    for row, n in zip(tokens, lengths):
        ids = row[:n].tolist()
        text = decode_fn(ids)
        if not any(s in text for s in stop_strings):
            cuts.append(None)
            continue
        lo, hi = 1, n  # smallest m with a stop string inside decode(ids[:m]); containment is monotone in m
        while lo < hi:
            mid = (lo + hi) // 2
            t = decode_fn(ids[:mid])
            if any(s in t for s in stop_strings):
                hi = mid
            else:
                lo = mid + 1
        cuts.append(lo)
    return cuts


def _pin_cache(cache: KVCache, mesh) -> KVCache:
    return jax.lax.with_sharding_constraint(cache, kv_cache_shardings(cache, mesh))


def on_mesh(x, mesh, *, rows: bool = True):
    """A device array split by rows over the mesh's data x fsdp (or replicated), each process placing its
    devices' slices from its own identical copy."""
    return as_sharded(x, NamedSharding(mesh, P(BATCH) if rows and np.ndim(x) else P()))


def pad_rows_for_mesh(tokens, lengths, pad_id: int, mesh):
    """Filler prompts (one pad token each, discarded afterwards) until the rows divide over data x fsdp."""
    extra = (-tokens.shape[0]) % batch_shards(mesh)
    if not extra:
        return tokens, lengths
    return (np.concatenate([tokens, np.full((extra, tokens.shape[1]), pad_id, tokens.dtype)]),
            np.concatenate([lengths, np.ones((extra,), lengths.dtype)]))


def carry_on_mesh(carry: DecodeCarry, mesh) -> DecodeCarry:
    rows = {f: on_mesh(getattr(carry, f), mesh) for f in DecodeCarry._fields if f not in ("cache", "step", "key")}
    return carry._replace(cache=as_sharded(carry.cache, kv_cache_shardings(carry.cache, mesh)),
                          step=on_mesh(carry.step, mesh, rows=False), key=on_mesh(carry.key, mesh, rows=False),
                          **rows)


def initial_carry(cache: KVCache, last, lengths, n_prompts: int, num_samples: int, max_new_tokens: int,
                  pad_id: int, key, mesh) -> DecodeCarry:
    """The decode loop's state after `prefill`, laid out on `mesh`: rows past `n_prompts * num_samples` (filler
    prompts) start done."""
    n = lengths.shape[0] * num_samples
    start_pos = np.repeat(lengths, num_samples)
    done = np.zeros((n,), bool)
    done[n_prompts * num_samples:] = True  # filler rows from batch bucketing
    carry = DecodeCarry(cache, last, jnp.full((n, max_new_tokens), pad_id, jnp.int32),
                   jnp.zeros((n, max_new_tokens), jnp.float32), jnp.zeros((n, max_new_tokens), jnp.float32),
                   jnp.asarray(done), jnp.full((n,), FINISH_LENGTH, jnp.int32), jnp.zeros((n,), jnp.int32),
                   jnp.asarray(start_pos, jnp.int32), jnp.zeros((), jnp.int32),
                   jnp.array(key, copy=True))  # the carry is donated; never donate the caller's key
    return carry_on_mesh(carry, mesh)


def decode_loop(graphdef, state, carry: DecodeCarry, sp, mesh, *, max_new_tokens: int, chunk: int, stop_strings,
                decode_text, live: np.ndarray, pad_id: int, progress=None, uniform_rows: Optional[int] = None,
                row_offset: int = 0):
    """`decode` from `carry` for up to `max_new_tokens` steps, in calls of `chunk` steps. Between calls the host
    cuts each `live` row after the first of `stop_strings` in its text (`decode_text(ids)`) and marks it done; a
    stop id earlier than the stop string wins. Returns (the final carry, host (tokens, logprobs,
    sampling_logprobs, lengths, finish)) with a cut row's tail set to `pad_id` and 0 and its finish FINISH_STOP.
    uniform_rows, row_offset: `decode`'s (a row chunk of a larger batch)."""
    n = live.shape[0]
    stop_cut = np.full((n,), -1, np.int64)
    step = 0
    while step < max_new_tokens:
        step = min(step + chunk, max_new_tokens)
        with jax.set_mesh(mesh):  # traced under the mesh: the model pins its activations' rows to it
            chunked = {} if uniform_rows is None else dict(
                uniform_rows=uniform_rows, row_offset=on_mesh(np.int32(row_offset), mesh, rows=False))
            carry = decode(graphdef, state, carry, on_mesh(np.int32(step), mesh, rows=False), *sp, mesh=mesh,
                           **chunked)
        if progress is not None:
            progress(int(carry.step), max_new_tokens)
        if stop_strings:
            host_done = _host(carry.done).copy()
            toks, lens = _host(carry.tokens), _host(carry.lengths)
            rows = [i for i in range(n) if stop_cut[i] < 0 and live[i]]
            cuts = cut_at_stop_strings(toks[rows], lens[rows], stop_strings, decode_text)
            newly = [(r, c) for r, c in zip(rows, cuts) if c is not None]
            for r, c in newly:
                stop_cut[r] = c
            if newly:
                host_done[[r for r, _ in newly]] = True
                carry = carry._replace(done=on_mesh(host_done, mesh))
        if bool(_host(carry.done).all()):
            break
    out_tokens = _host(carry.tokens).copy()
    out_lp = _host(carry.logprobs).copy()
    out_slp = _host(carry.sampling_logprobs).copy()
    out_len = _host(carry.lengths).copy()
    finish = _host(carry.finish).copy()
    for r in np.nonzero(stop_cut >= 0)[0]:
        c = int(stop_cut[r])
        if finish[r] == FINISH_EOS and out_len[r] <= c:  # the stop id ended the row first
            continue
        out_tokens[r, c:] = pad_id
        out_lp[r, c:] = 0.0
        out_slp[r, c:] = 0.0
        out_len[r] = c
        finish[r] = FINISH_STOP
    return carry, (out_tokens, out_lp, out_slp, out_len, finish)


def _host(x) -> np.ndarray:
    return to_host(x)


def sample(model: Qwen2, prompts, key: jax.Array, *, max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, top_k: int = 0, num_samples: int = 1, stop_token_ids: Sequence[int] = (),
           stop_strings: Sequence[str] = (), tokenizer: Any = None, pad_id: Optional[int] = None,
           chunk_steps: int = 32, progress: Optional[Any] = None, state=None, mesh=None,
           prompts_per_call: int = 0) -> SampleOutput:
    """Sample `num_samples` completions for each prompt.

    prompts: a list of token-id lists (ragged), or (tokens [B, L] left-padded, lengths [B]).
    stop_token_ids end a row inside the compiled loop (the stop token is kept as the last token).
    stop_strings need `tokenizer` (anything with `.decode(ids)`): the completion is cut right after the first
    token whose text completes a stop string; tokens, log-probs and length are cut with it. Decoding runs in
    chunks of `chunk_steps` so rows that hit a stop string stop early.
    state: optional params (nnx.State) to use instead of the model's own (e.g. the trainer's latest).
    mesh: the `parallel.make_mesh` mesh that `state` is sharded on (None: the mesh of `state`'s shardings, or the
    one-device mesh): rows (prompts, samples, KV cache) are split over data x fsdp and kv heads over tp; every
    process of a multi-host run makes the same call and gets the whole output.
    prompts_per_call: prefill and decode at most this many prompts at a time (0: all at once), so that the KV
    cache holds one chunk's rows instead of the whole batch's; every row draws the uniforms it would draw in one
    call over the whole batch, at the same padded prompt length, so the tokens are those of one call (log-probs
    up to the float rounding of a smaller batch's matmuls).
    """
    if max_new_tokens <= 0:
        raise ValueError(f"sample(): max_new_tokens must be positive, got {max_new_tokens}")
    if num_samples <= 0:
        raise ValueError(f"sample(): num_samples must be positive, got {num_samples}")
    if temperature < 0:
        raise ValueError(f"sample(): temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"sample(): top_p must be in (0, 1], got {top_p}")
    if stop_strings and tokenizer is None:
        raise ValueError("sample(): stop_strings need `tokenizer=` to decode completions")
    if prompts_per_call < 0:
        raise ValueError(f"sample(): prompts_per_call must be >= 0 (0 = all prompts in one call), got "
                         f"{prompts_per_call}")
    stop_token_ids = [int(t) for t in stop_token_ids]
    if len(stop_token_ids) > MAX_STOP_IDS:
        raise ValueError(f"sample(): at most {MAX_STOP_IDS} stop_token_ids are supported")
    if pad_id is None:
        pad_id = stop_token_ids[0] if stop_token_ids else 0
    cfg = model.config
    graphdef, own_state = nnx.split(model)
    state = own_state if state is None else state
    mesh = resolve_mesh(mesh, like=state)
    tokens, lengths, n_prompts = as_prompt_batch(prompts, pad_id, cfg.max_position_embeddings, max_new_tokens)
    tokens, lengths = pad_rows_for_mesh(tokens, lengths, pad_id, mesh)
    stop_arr = jnp.asarray(stop_token_ids + [-1] * (MAX_STOP_IDS - len(stop_token_ids)), jnp.int32)
    sp = (jnp.float32(temperature), jnp.float32(top_p), jnp.int32(top_k), stop_arr, jnp.int32(pad_id))
    sp = tuple(on_mesh(x, mesh, rows=False) for x in sp)
    chunk = max_new_tokens if not stop_strings and progress is None else max(1, chunk_steps)
    loop = dict(max_new_tokens=max_new_tokens, chunk=chunk, stop_strings=stop_strings,
                decode_text=tokenizer.decode if stop_strings else None, pad_id=pad_id, progress=progress)
    if prompts_per_call and n_prompts > prompts_per_call:
        outs = []
        for first in range(0, n_prompts, prompts_per_call):
            m = min(prompts_per_call, n_prompts - first)
            rows = sampler_rows(m)  # filler prompts as as_prompt_batch makes them: one pad token each
            t = np.full((rows, tokens.shape[1]), pad_id, tokens.dtype)
            ln = np.ones((rows,), lengths.dtype)
            t[:m], ln[:m] = tokens[first:first + m], lengths[first:first + m]
            t, ln = pad_rows_for_mesh(t, ln, pad_id, mesh)
            with jax.set_mesh(mesh):
                cache, last = prefill(graphdef, state, on_mesh(t, mesh), on_mesh(ln, mesh),
                                      num_samples=num_samples, max_new_tokens=max_new_tokens, mesh=mesh)
            carry = initial_carry(cache, last, ln, m, num_samples, max_new_tokens, pad_id, key, mesh)
            live = np.arange(carry.tokens.shape[0]) < m * num_samples
            del cache, last
            _, out = decode_loop(graphdef, state, carry, sp, mesh, live=live,
                                 uniform_rows=tokens.shape[0] * num_samples, row_offset=first * num_samples, **loop)
            outs.append([x[:m * num_samples] for x in out])
        out_tokens, out_lp, out_slp, out_len, finish = (np.concatenate(x) for x in zip(*outs))
        return SampleOutput(out_tokens, out_lp, out_slp, out_len, finish,
                            np.repeat(np.arange(n_prompts, dtype=np.int32), num_samples))
    with jax.set_mesh(mesh):  # traced under the mesh: the model pins its activations' rows to it
        cache, last = prefill(graphdef, state, on_mesh(tokens, mesh), on_mesh(lengths, mesh),
                              num_samples=num_samples, max_new_tokens=max_new_tokens, mesh=mesh)
    carry = initial_carry(cache, last, lengths, n_prompts, num_samples, max_new_tokens, pad_id, key, mesh)
    n = carry.tokens.shape[0]
    _, out = decode_loop(graphdef, state, carry, sp, mesh, live=np.arange(n) < n_prompts * num_samples, **loop)
    out_tokens, out_lp, out_slp, out_len, finish = out
    keep = n_prompts * num_samples
    return SampleOutput(out_tokens[:keep], out_lp[:keep], out_slp[:keep], out_len[:keep], finish[:keep],
                        np.repeat(np.arange(n_prompts, dtype=np.int32), num_samples))
