"""What a method sees (rollouts) and what it returns (a TokenBatch and metrics)."""
from __future__ import annotations

import zlib
from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence

import jax
import numpy as np

from jaxrl_reason.rl.batch import TokenBatch, concat_batches
from jaxrl_reason.rl.losses import TermSpec


class Rollouts(NamedTuple):
    """One step's solve rollouts, prompt-major: row r belongs to question r // G.

    examples:    [Q] dataset examples
    prompts:     [Q] prompt token ids (chat-rendered solve prompts)
    completions: [Q*G] completion token ids (stop token included)
    logprobs:    [Q*G] float32 arrays, the sampler's log pi_old per completion token (tempered policy, untruncated)
    texts:       [Q*G] decoded completions (special tokens skipped)
    rewards:     float32 [Q, G]
    finish:      [Q*G] "eos" | "stop" | "length"
    details:     [Q*G] reward details
    sampling_logprobs: [Q*G] float32 arrays, log q of the distribution actually sampled from (top-p / top-k
                 truncated); None when unknown. Truncated importance sampling weighs by pi_old / q.
    """

    examples: Sequence[Any]
    prompts: Sequence[Sequence[int]]
    completions: Sequence[Sequence[int]]
    logprobs: Sequence[np.ndarray]
    texts: Sequence[str]
    rewards: np.ndarray
    finish: Sequence[str]
    details: Sequence[dict]
    sampling_logprobs: Optional[Sequence[np.ndarray]] = None
    token_masks: Optional[Sequence[np.ndarray]] = None

    @property
    def group_size(self) -> int:
        return int(self.rewards.shape[1])


def generate_rollouts(sample: Callable[..., Any], tokenizer, prompts: Sequence[Sequence[int]],
                      examples: Sequence[Any], *, num_samples: int, reward: Optional[Callable] = None,
                      **sample_kw) -> Rollouts:
    """The one way rollouts are made, for the trainer and every method: sample `num_samples` completions of each
    prompt, decode them, reward them against `examples` (one per prompt) and keep the sampler's log pi_old and
    log q per completion token. `reward(texts, examples) -> RewardResult`; None leaves the rewards 0 (e.g. a
    critique, which no verifier grades)."""
    if len(prompts) != len(examples):
        raise ValueError(f"generate_rollouts: {len(prompts)} prompts but {len(examples)} examples; give one each")
    out = sample(prompts, num_samples=num_samples, **sample_kw)
    n = len(out.lengths)
    texts = tokenizer.batch_decode(out.tokens, lengths=out.lengths, skip_special_tokens=True)
    if reward is None:
        scores, details = np.zeros((n,), np.float32), [{} for _ in range(n)]
    else:
        res = reward(texts, [examples[i] for i in out.prompt_index])
        scores, details = np.asarray(res.scores, np.float32), list(res.details)
    cut = lambda a: [np.asarray(a[i, :m], np.float32) for i, m in enumerate(out.lengths)]
    return Rollouts(list(examples), [list(p) for p in prompts], out.completions(), cut(out.logprobs), texts,
                    scores.reshape(len(prompts), num_samples), out.finish_names(), details,
                    cut(out.sampling_logprobs))


def tool_rollouts(out, examples: Sequence[Any], *, reward: Optional[Callable] = None) -> tuple[Rollouts, dict]:
    """Rollouts of a multi-turn, tool-using sample (`rollout.multiturn.MultiTurnOutput`): completions hold the
    model's and the environment's turns, `token_masks` mark the model's, and `reward(texts, examples)` grades the
    model's turns (an environment's own final reward wins where it gave one). Also returns the tool metrics."""
    n, q = len(out.completions), len(examples)
    g = n // max(q, 1)
    if reward is None:
        scores, details = np.zeros((n,), np.float32), [{} for _ in range(n)]
    else:
        res = reward(out.texts, [examples[i] for i in out.prompt_index])
        scores, details = np.asarray(res.scores, np.float32), list(res.details)
    scores = np.where(np.isnan(out.env_rewards), scores, out.env_rewards).astype(np.float32)
    env_tokens = sum(float((1 - m).sum()) for m in out.model_mask)
    all_tokens = max(sum(len(c) for c in out.completions), 1)
    calls = out.calls.astype(np.float64)
    metrics = {"tools/calls_per_sample": float(calls.mean()),
               "tools/call_success": float(out.calls_ok.sum() / max(calls.sum(), 1)),
               "tools/turns_mean": float(np.mean([len(t) for t in out.turns])),
               "tools/env_token_frac": env_tokens / all_tokens}
    for f in ("eos", "length", "budget", "max_turns"):
        metrics[f"tools/finish_{f}"] = float(np.mean([x == f for x in out.finish]))
    ro = Rollouts(list(examples), [list(p) for p in out.prompts], out.completions, out.logprobs, out.texts,
                  scores.reshape(q, g), out.finish, details, out.sampling_logprobs, out.model_mask)
    return ro, metrics


def check_tool_rows(method, tool_names: Sequence[str]) -> None:
    """Start-up check of a run with tools (`tool_names` non-empty): its method must train on multi-turn rows. Each
    method says so (`GRPO.tool_rows_refusal`: every `build` along its MRO declares `trains_tool_rows`); one that
    does not is refused, with its reason, before any compute rather than trained on environment tokens."""
    if not tool_names:
        return
    refusal = getattr(method, "tool_rows_refusal", None)
    why = ("it does not say whether it trains on tool rows (a GRPO subclass declares trains_tool_rows)"
           if refusal is None else refusal())
    if why:
        raise ValueError(f"config tools.tools={list(tool_names)}: method {method.name!r} does not train on "
                         f"multi-turn tool rows ({why}); use grpo (any estimator), rlv, cure, cipo or self_check, "
                         "or set tools.tools=[]")


class RowFormats(NamedTuple):
    """How the data writes the rows of the self-checking tasks (data.verify_format, critique_format,
    correction_format, guided_layout, prompt_wording); the defaults are the papers' formats."""

    # (question, completion) -> a verify row's target text when the data writes a worked check before the verdict
    # (data.verify_format="worked_check" / "mark_check"); None: the one-token verdict
    verify_target: Optional[Callable[[str, str], str]] = None
    # (question, completion) -> the worked check a critique opens with, before its verdict (data.critique_format=
    # "worked_check"; CURE forces it with the verdict); None: the critique opens with its verdict
    # (docs/methods/cure.md#spec-critique)
    critique_check: Optional[Callable[[str, str], str]] = None
    # what a correction prompt asks for (data.correction_format): "solution" | "worked_check" (the check first)
    correction_format: str = "solution"
    # CURE's guided re-solve prompt (data.guided_layout, `prompts.guided_prompt`): "after" | "first"
    guided_layout: str = "after"
    # CURE's critique and guided prompts' wording (data.prompt_wording, `prompts.PROMPT_WORDINGS`): "short" | "authors"
    prompt_wording: str = "short"


class Context(NamedTuple):
    """Services a method may call while building its batch (more generation, rewards, the tokenizer)."""

    tokenizer: Any
    sample: Callable[..., Any]  # sample(prompt_token_lists, num_samples=..., **kw) -> SampleOutput (current policy)
    reward: Callable[[Sequence[str], Sequence[Any]], Any]  # (texts, examples) -> RewardResult
    rng: np.random.Generator  # host-side randomness (subsampling), seeded from the step's key
    pad_id: int
    model: Any = None  # the policy module (structure only; its weights may be stale)
    params: Any = None  # the current policy parameters (nnx.State) — use these, not the module's own
    temperature: float = 1.0  # the sampling temperature: a recomputed pi_old scores under logits / temperature
    max_new_tokens: int = 0  # the trainer's generation limit (DAPO's overlong shaping reads it; 0 = unknown)
    formats: RowFormats = RowFormats()  # how verify rows, critiques and corrections are written
    # stream(name) -> a sampler like `sample` whose keys no other stream (nor `sample`) draws: a union's parts
    # sample from their own streams, so the order the parts run in (their classes' order) changes no sample
    streams: Optional[Callable[[str], Callable[..., Any]]] = None


def part_context(ctx: Context, part: str) -> Context:
    """`ctx` for one part of a union (e.g. "verify", "critique", "correct"): its own host randomness and, when the
    trainer provides streams, its own sampler, both functions of the step and the part's name alone. The parts of
    a union then draw the same numbers in any class order; a method of one part keeps `ctx` itself (its numbers
    stay what they were before unions existed)."""
    seq = getattr(ctx.rng.bit_generator, "seed_seq", None)
    if not isinstance(seq, np.random.SeedSequence):
        raise ValueError("part_context: the Context's rng must come from np.random.default_rng(seed) (a union "
                         "derives each part's randomness from its seed sequence)")
    tag = zlib.crc32(part.encode())
    rng = np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, tag)))
    sample = ctx.sample if ctx.streams is None else ctx.streams(part)
    return ctx._replace(rng=rng, sample=sample)


def join_rows(batches: Sequence[TokenBatch]) -> TokenBatch:
    """The rows of `batches` in one batch, ordered by task (`rl.batch.TASKS` id: solve, verify, critique,
    guided_solve, correct), each task's rows in the order given. A union's parts add their rows in their classes'
    order; this makes the batch the same for any order. A single method's rows already come in this order."""
    batch = concat_batches([b for b in batches if b.batch_size] or list(batches[:1]))
    order = np.argsort(np.asarray(batch.task_id), kind="stable")
    if np.array_equal(order, np.arange(len(order))):
        return batch
    return jax.tree.map(lambda x: x[order], batch)


class Method(Protocol):
    """What the trainer calls. `GRPO` implements it; subclass it for a new method (docs/extending.md)."""

    name: str
    tasks: tuple[str, ...]  # the tasks whose rows `build` returns (registered when the class is defined)
    uses_zero_signal_groups: bool  # trains on groups with equal rewards: DAPO dynamic sampling is refused

    critic: Optional[str]  # None | "head" | "separate": what `prepare` attaches beside the policy

    def check(self, config, task, tokenizer) -> None:  # start-up: refuse a run it cannot train, naming the knob
        ...

    def prepare(self, model, seed: int) -> None:  # before the update is built: attach what it trains beside the policy
        ...

    def terms(self) -> tuple[TermSpec, ...]:
        ...

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        ...

    def state_dict(self) -> dict:  # host state to checkpoint (e.g. CIPO's replay ratio)
        ...

    def load_state_dict(self, d: dict) -> None:
        ...
