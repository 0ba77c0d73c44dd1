"""Multi-turn rollouts: the policy writes until a tool call (or the end of its reply), the environment answers
with an observation turn, and the policy continues **from its KV cache**, prefilling only the new turn's tokens.

Layout (the sampler's, `sampling/sampler.py`): all rows write the same cache slot at each step and differ by
position ids and the `valid` mask. A turn's decode writes slots index .. index + steps - 1; a row that stopped
earlier (its stop string, its own budget) gets the slots after its last kept token marked invalid, then the
environment turn is written right-padded at the next slots (padding invalid). Invalid slots are never attended,
and RoPE reads positions, not slots, so the gaps change nothing: the next turn's logits are those of a fresh
prefill of the whole conversation, up to float rounding. `ToolConfig.continue_from_cache=False` runs that
re-prefill instead (the baseline of the tests and of the throughput benchmark); both draw turn t's tokens from
the same uniforms (key `fold_in(key, t)`, one per (step, row)), so they sample the same tokens.

Rows carry a per-token mask: 1 on tokens the model wrote (trained; their log-probs are the sampler's log pi_old
at the sampling temperature), 0 on environment tokens (no loss, no pi_old). The total budget `max_tokens` counts
every token after the prompt, model and environment alike.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_reason.buckets import power_of_two
from jaxrl_reason.models.qwen2 import Qwen2
from jaxrl_reason.parallel.mesh import resolve_mesh, to_host
from jaxrl_reason.rollout.tools import ToolEnv, make_tool, step_all
from jaxrl_reason.sampling.sampler import (FINISH_EOS, FINISH_LENGTH, MAX_STOP_IDS, DecodeCarry, as_prompt_batch,
                                           carry_on_mesh, on_mesh, pad_rows_for_mesh, decode_loop, prefill)


@dataclasses.dataclass
class ToolConfig:
    """Tool-integrated rollouts (the trainer's total token budget is `rl.max_new_tokens`)."""

    tools: tuple = ()  # names of registered tools (rollout.tools.TOOLS); empty = single-turn rollouts
    tool_kwargs: dict = dataclasses.field(default_factory=dict)  # {tool name: {constructor keyword: value}}
    max_turns: int = 4  # model turns per conversation; a call at the last turn ends the row ("max_turns")
    max_turn_tokens: int = 64  # tokens the model may write in one turn
    max_obs_tokens: int = 48  # an environment turn (template tokens included) is cut to this many tokens
    observation_role: str = "tool"  # chat role of environment turns in the chat template
    instructions: bool = True  # the first message lists the tools' call syntax
    continue_from_cache: bool = True  # False: re-prefill the whole conversation each turn (a baseline; slower)
    chunk_steps: int = 16  # decode steps between host checks for a tool-call delimiter

    def __post_init__(self):
        self.tools = tuple(self.tools)
        for f in ("max_turns", "max_turn_tokens", "max_obs_tokens", "chunk_steps"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"ToolConfig.{f} must be >= 1, got {getattr(self, f)}")
        from jaxrl_reason.rollout.tools import TOOLS
        for name in self.tools:
            if name not in TOOLS:
                raise ValueError(f"ToolConfig.tools: unknown tool {name!r}; registered: {sorted(TOOLS)}")
        for name in self.tool_kwargs:
            if name not in self.tools:
                raise ValueError(f"ToolConfig.tool_kwargs names {name!r}, which is not in tools={self.tools}")

    @property
    def enabled(self) -> bool:
        return bool(self.tools)

    def make_env(self, prompt_fn: Callable[[str], str]) -> Callable[[], ToolEnv]:
        """A factory of episodes; the tools are built once and shared (they hold no per-episode state)."""
        tools = [make_tool(n, **dict(self.tool_kwargs.get(n, {}))) for n in self.tools]
        return lambda: ToolEnv(tools, prompt_fn, instructions=self.instructions)


class MultiTurnOutput(NamedTuple):
    """Rows are prompt-major (row r belongs to question r // num_samples); per-row lists cover tokens after the
    prompt, model and environment turns interleaved.

    prompts:        [Q] prompt token ids (the environment's first message, chat-rendered)
    completions:    [N] token ids after the prompt
    model_mask:     [N] float32, 1 on tokens the model wrote, 0 on environment tokens
    logprobs:       [N] float32, log pi_T of model tokens (0 on environment tokens)
    sampling_logprobs: [N] float32, log q of model tokens (0 on environment tokens)
    finish:         [N] eos | length (a turn ran out of max_turn_tokens) | budget | max_turns
    turns:          [N] list of (model tokens, environment tokens) per turn
    texts:          [N] the model's turns decoded (special tokens skipped), joined by newlines: what is graded
    calls, calls_ok: [N] int tool calls made, and how many ran successfully
    env_rewards:    [N] float32, an environment's own final reward, NaN where it gave none
    """

    prompts: list
    completions: list
    model_mask: list
    logprobs: list
    sampling_logprobs: list
    finish: list
    turns: list
    texts: list
    calls: np.ndarray
    calls_ok: np.ndarray
    env_rewards: np.ndarray

    @property
    def prompt_index(self) -> np.ndarray:
        g = len(self.completions) // max(len(self.prompts), 1)
        return np.repeat(np.arange(len(self.prompts), dtype=np.int32), g)


def env_turn_pieces(tokenizer, role: str) -> tuple[str, str]:
    """(text before, text after) an environment turn's content, closing the model's turn and opening its next one,
    in the tokenizer's chat template (`Tokenizer.render_env_turn`)."""
    marker = "\x00OBSERVATION\x00"
    text = tokenizer.render_env_turn(marker, role=role)
    i = text.index(marker)
    return text[:i], text[i + len(marker):]


def env_turn_ids(tokenizer, observation: str, role: str, max_tokens: int) -> list[int]:
    """Token ids of one environment turn; an observation too long for `max_tokens` is cut (the template's tokens
    around it are always whole)."""
    pre, post = env_turn_pieces(tokenizer, role)
    pre_ids, post_ids = tokenizer.encode(pre), tokenizer.encode(post)
    room = max_tokens - len(pre_ids) - len(post_ids)
    if room < 1:
        raise ValueError(f"ToolConfig.max_obs_tokens={max_tokens} leaves no room for an observation: the chat "
                         f"template's environment turn alone is {len(pre_ids) + len(post_ids)} tokens; raise it")
    return pre_ids + tokenizer.encode(observation)[:room] + post_ids


@functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("cache",))
def _extend(graphdef, state, cache, keep_until, tokens, positions, segment_ids, hidden):
    """Invalidate each row's slots from `keep_until[r]` on (tokens decoded past a row's stop), then write the
    environment turn (right-padded [N, T]) at the next T slots. Returns (cache, hidden of each row's last token;
    rows without environment tokens keep `hidden`)."""
    model: Qwen2 = nnx.merge(graphdef, state)
    slots = jnp.arange(cache.valid.shape[1])
    cache = cache._replace(valid=cache.valid & (slots[None, :] < keep_until[:, None]))
    h, cache = model.hidden_states(tokens, positions, segment_ids, cache=cache)
    n_env = jnp.sum(segment_ids != 0, axis=1)
    last = h[jnp.arange(h.shape[0]), jnp.maximum(n_env - 1, 0)]
    return cache, jnp.where((n_env > 0)[:, None], last, hidden)


def _grow_to(cache, slots: int):
    """The cache with at least `slots` slots, rounded up to a multiple of 64 so few shapes compile."""
    have = cache.valid.shape[1]
    if have >= slots:
        return cache
    return cache.grow(-(-slots // 64) * 64 - have)


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    length = power_of_two(max(len(r) for r in rows))
    tokens = np.full((len(rows), length), pad_id, np.int32)
    for i, r in enumerate(rows):
        tokens[i, length - len(r):] = r
    return tokens, np.asarray([len(r) for r in rows], np.int32)


def _decode_turn(graphdef, state, cache, hidden, positions, done, key, sp, *, max_new: int, stop_strings,
                 tokenizer, chunk: int, mesh):
    """One turn of decoding for every row not `done`: the sampler's jitted decode in chunks, each row cut after
    the first stop string. Returns (cache, hidden, tokens, logprobs, sampling_logprobs, lengths, finish) on the host."""
    n = done.shape[0]
    pad_id = int(sp[-1])
    carry = DecodeCarry(cache, hidden, jnp.full((n, max_new), pad_id, jnp.int32), jnp.zeros((n, max_new), jnp.float32),
                   jnp.zeros((n, max_new), jnp.float32), jnp.asarray(done), jnp.full((n,), FINISH_LENGTH, jnp.int32),
                   jnp.zeros((n,), jnp.int32), jnp.asarray(positions, jnp.int32), jnp.zeros((), jnp.int32),
                   jnp.array(key, copy=True))
    carry = carry_on_mesh(carry, mesh)
    carry, (toks, lp, slp, lens, finish) = decode_loop(
        graphdef, state, carry, sp, mesh, max_new_tokens=max_new, chunk=chunk, stop_strings=stop_strings,
        decode_text=tokenizer.decode, live=~np.asarray(done), pad_id=pad_id)
    return carry.cache, carry.hidden, toks, lp, slp, lens, finish


def multi_turn_sample(model: Qwen2, tokenizer, examples: Sequence[Any], make_env: Callable[[], ToolEnv],
                      key: jax.Array, *, config: ToolConfig, max_tokens: int, num_samples: int = 1,
                      temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, state=None, mesh=None,
                      progress: Optional[Callable[[int, int], None]] = None) -> MultiTurnOutput:
    """`num_samples` tool-using conversations per example. max_tokens: the budget of each row after its prompt
    (model and environment tokens together); a row stops at it ("budget"), at `config.max_turns` ("max_turns"),
    at the end of its reply ("eos") or when a turn writes `config.max_turn_tokens` without a call ("length")."""
    if max_tokens <= 0:
        raise ValueError(f"multi_turn_sample: max_tokens must be positive, got {max_tokens}")
    if temperature < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"multi_turn_sample: need temperature >= 0 and top_p in (0, 1], got {temperature}, {top_p}")
    g = num_samples
    envs = [make_env() for _ in range(len(examples) * g)]
    firsts = [envs[r].reset(examples[r // g]) for r in range(len(envs))]
    prompts = [tokenizer.encode(tokenizer.render_prompt(firsts[q * g])) for q in range(len(examples))]
    stop_strings = tuple(envs[0].stop_strings)
    stop_ids = [int(t) for t in tokenizer.stop_ids][:MAX_STOP_IDS]
    pad_id = int(tokenizer.pad_id)
    graphdef, own_state = nnx.split(model)
    state = own_state if state is None else state
    mesh = resolve_mesh(mesh, like=state)
    tokens, lengths, nq = as_prompt_batch(prompts, pad_id, model.config.max_position_embeddings, max_tokens)
    tokens, lengths = pad_rows_for_mesh(tokens, lengths, pad_id, mesh)
    n, live_rows = tokens.shape[0] * g, nq * g
    m = min(config.max_turn_tokens, max_tokens)
    stop_arr = jnp.asarray(stop_ids + [-1] * (MAX_STOP_IDS - len(stop_ids)), jnp.int32)
    sp = (jnp.float32(temperature), jnp.float32(top_p), jnp.int32(top_k), stop_arr, jnp.int32(pad_id))
    sp = tuple(on_mesh(x, mesh, rows=False) for x in sp)

    row_prompt = [prompts[r // g] if r < live_rows else [pad_id] for r in range(n)]
    conv = [[] for _ in range(n)]
    mask, lps, slps = [[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)]
    turns = [[] for _ in range(n)]
    texts = [[] for _ in range(n)]
    done = np.arange(n) >= live_rows
    finish = ["length"] * n
    env_rewards = np.full((n,), np.nan, np.float32)
    next_pos = np.repeat(lengths, g).astype(np.int64)
    used = np.zeros((n,), np.int64)

    with jax.set_mesh(mesh):
        cache, hidden = prefill(graphdef, state, on_mesh(tokens, mesh), on_mesh(lengths, mesh), num_samples=g,
                                max_new_tokens=m, mesh=mesh)
    pending_env: list = [[] for _ in range(n)]
    keep_until = np.full((n,), np.iinfo(np.int32).max, np.int64)
    for t in range(config.max_turns):
        if t > 0:
            if config.continue_from_cache:
                t_env = min(power_of_two(max(len(e) for e in pending_env), 8), config.max_obs_tokens)
                env_tok = np.full((n, t_env), pad_id, np.int32)
                env_pos, env_seg = np.zeros((n, t_env), np.int32), np.zeros((n, t_env), np.int32)
                for r, e in enumerate(pending_env):
                    k = len(e)
                    env_tok[r, :k], env_seg[r, :k] = e, 1
                    env_pos[r, :k] = next_pos[r] - k + np.arange(k)
                index = int(to_host(cache.index))
                cache = _grow_to(cache, index + t_env + m)
                with jax.set_mesh(mesh):
                    cache, hidden = _extend(graphdef, state, cache, on_mesh(np.minimum(keep_until, index), mesh),
                                            on_mesh(env_tok, mesh), on_mesh(env_pos, mesh),
                                            on_mesh(env_seg, mesh), hidden)
            else:
                rows = [row_prompt[r] + conv[r] if not done[r] else [pad_id] for r in range(n)]
                ctok, clen = _left_pad(rows, pad_id)
                with jax.set_mesh(mesh):
                    cache, hidden = prefill(graphdef, state, on_mesh(ctok, mesh), on_mesh(clen, mesh),
                                            num_samples=1, max_new_tokens=m, mesh=mesh)
                next_pos = np.where(done, next_pos, clen)
        base = int(to_host(cache.index))
        cache, hidden, toks, lp, slp, lens, fin = _decode_turn(
            graphdef, state, cache, hidden, next_pos, done.copy(), jax.random.fold_in(key, t), sp, max_new=m,
            stop_strings=stop_strings, tokenizer=tokenizer, chunk=config.chunk_steps, mesh=mesh)
        pending_env = [[] for _ in range(n)]
        keep_until[:] = np.iinfo(np.int32).max
        step_texts: list = [None] * n
        wants_call = np.zeros((n,), bool)
        for r in np.nonzero(~done)[0]:
            k = int(lens[r])
            room = max_tokens - int(used[r])
            over = k > room
            k = min(k, room)
            keep_until[r] = base + k
            ids = toks[r, :k].tolist()
            conv[r] += ids
            mask[r] += [1.0] * k
            lps[r] += lp[r, :k].tolist()
            slps[r] += slp[r, :k].tolist()
            used[r] += k
            next_pos[r] += k
            turns[r].append([k, 0])
            text = tokenizer.decode(ids, skip_special_tokens=True)
            texts[r].append(text)
            if over:
                done[r], finish[r] = True, "budget"
            elif fin[r] == FINISH_LENGTH:
                done[r], finish[r] = True, "length"
            elif fin[r] == FINISH_EOS:
                done[r], finish[r] = True, "eos"
                step_texts[r] = text  # the env sees the final answer (it may give its own reward)
            elif t == config.max_turns - 1:
                done[r], finish[r] = True, "max_turns"
            else:
                step_texts[r], wants_call[r] = text, True
        steps = step_all(envs, step_texts)
        for r, s in enumerate(steps):
            if s is None:
                continue
            if s.reward is not None:
                env_rewards[r] = s.reward
            if not wants_call[r]:
                continue
            if s.done or s.observation is None:
                done[r], finish[r] = True, "eos"
                continue
            ids = env_turn_ids(tokenizer, s.observation, config.observation_role, config.max_obs_tokens)
            if used[r] + len(ids) >= max_tokens:  # no room left for the model to read it and answer
                done[r], finish[r] = True, "budget"
                continue
            pending_env[r] = ids
            conv[r] += ids
            mask[r] += [0.0] * len(ids)
            lps[r] += [0.0] * len(ids)
            slps[r] += [0.0] * len(ids)
            used[r] += len(ids)
            next_pos[r] += len(ids)
            turns[r][-1][1] = len(ids)
        if progress is not None:
            progress(t + 1, config.max_turns)
        if done.all():
            break
    keep = live_rows
    as_f32 = lambda rows: [np.asarray(x, np.float32) for x in rows[:keep]]  # noqa: E731
    return MultiTurnOutput(
        prompts, conv[:keep], as_f32(mask), as_f32(lps), as_f32(slps), finish[:keep],
        [[tuple(x) for x in tr] for tr in turns[:keep]], ["\n".join(x) for x in texts[:keep]],
        np.asarray([len(e.calls) for e in envs[:keep]], np.int32),
        np.asarray([sum(r.ok for r in e.results) for e in envs[:keep]], np.int32), env_rewards[:keep])


def demo_solution(turns: Sequence[str], tokenizer, role: str = "tool") -> tuple[str, list]:
    """A worked multi-turn demonstration for an SFT warm-up: `turns` alternate model text and observations
    (model, observation, model, ...). Returns (solution text, spans) where the spans (start, end, 0.0) cover the
    environment turns, so that `train.trainer.sft_rows(span_weights=...)` trains only the model's text, as RL does."""
    if len(turns) % 2 != 1:
        raise ValueError("demo_solution: turns alternate model / observation and end with a model turn")
    pre, post = env_turn_pieces(tokenizer, role)
    text, spans = "", []
    for i, t in enumerate(turns):
        if i % 2:
            env = pre + t + post
            spans.append((len(text), len(text) + len(env), 0.0))
            text += env
        else:
            text += t
    return text, spans
