"""What a method sees (rollouts) and what it returns (a TokenBatch and metrics)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol, Sequence

import numpy as np

from jaxrl_reason.rl.batch import TokenBatch
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

    @property
    def group_size(self) -> int:
        return int(self.rewards.shape[1])


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


class Method(Protocol):
    name: str

    def terms(self) -> tuple[TermSpec, ...]:
        ...

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        ...

    def state_dict(self) -> dict:  # host state to checkpoint (e.g. CIPO's replay ratio)
        ...

    def load_state_dict(self, d: dict) -> None:
        ...
