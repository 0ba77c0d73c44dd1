"""VinePPO (docs/methods/vineppo.md#spec): Monte-Carlo values at reasoning-step boundaries instead of a learned critic.

Each sampled solution is split into steps (`step_boundaries`); from every boundary `K` continuations are sampled
with the current policy in one batched sampler call (each boundary's prefix is prefilled once and shared by its K
samples); `V(s_t)` is their mean reward, and every token of step t gets `V(s_{t+1}) - V(s_t)`, the last step
`reward - V(s_n)` (`step_advantages`). Choices (docs/methods/vineppo.md): V(s_0) is the mean reward of the question's
own G rollouts (`s0_from_group`); a continuation from boundary b keeps the rollout's budget, `max_new_tokens - b`.
`VinePPOV` is VinePPO^V: RL^V's verify rows on top (RLV's build calls this one's through the MRO).
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, shaped_rewards, solve_rows
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.rl.batch import TokenBatch


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


def boundary_token_ids(tokenizer, boundary_text: str = "\n") -> list[int]:
    """Every vocabulary id whose text ends with `boundary_text` (a BPE merges newlines into other tokens)."""
    ids = [i for i in range(tokenizer.vocab_size) if tokenizer.decode([i]).endswith(boundary_text)]
    if not ids:
        raise ValueError(f"vineppo: no token of the vocabulary ends with boundary_text={boundary_text!r}")
    return ids


class VinePPO(GRPO):
    """Solve rows whose per-token advantages are Monte-Carlo value differences between step boundaries."""

    name = "vineppo"
    trains_tool_rows = False
    no_tool_rows = ("its Monte-Carlo values re-sample each prefix as one single-turn completion, without the "
                    "tools, so a prefix that ends inside a conversation is continued by another process than the "
                    "rollout's")

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, *,
                 vine_samples: int = 4, max_steps: int = 8, boundary_text: str = "\n", s0_from_group: bool = True,
                 vine_prompts_per_call: int = 0, **kwargs):
        """vine_samples: K continuations per boundary; max_steps: cap on steps per solution (max_steps - 1
        interior boundaries, evenly spaced when there are more); boundary_text: a step ends after a token whose
        text ends with it; s0_from_group: V(s_0) = the question's mean reward over its G rollouts (else K more
        samples from the prompt); vine_prompts_per_call: states whose continuations are sampled together (0: all
        of a step's states in one sampler call; a cap keeps the KV cache to that many states x K rows, the same
        samples: `sampling.sampler.sample`'s prompts_per_call)."""
        super().__init__(estimator, loss, **kwargs)
        if vine_samples < 1:
            raise ValueError(f"vineppo vine_samples={vine_samples}: must be >= 1")
        if max_steps < 1:
            raise ValueError(f"vineppo max_steps={max_steps}: must be >= 1")
        if vine_prompts_per_call < 0:
            raise ValueError(f"vineppo vine_prompts_per_call={vine_prompts_per_call}: must be >= 0 (0 = every "
                             "state in one sampler call)")
        self.vine_prompts_per_call = int(vine_prompts_per_call)
        self.vine_samples, self.max_steps = int(vine_samples), int(max_steps)
        self.boundary_text, self.s0_from_group = boundary_text, bool(s0_from_group)
        self._boundary_ids = None

    def values(self, ro: Rollouts, ctx: Context) -> tuple[list, list, dict]:
        """-> (boundaries per row, [V(s_0), V(b_1), ...] per row, cost metrics)."""
        if self._boundary_ids is None:
            self._boundary_ids = boundary_token_ids(ctx.tokenizer, self.boundary_text)
        g, k = ro.group_size, self.vine_samples
        n = len(ro.completions)
        bounds = [step_boundaries(c, self._boundary_ids, self.max_steps) for c in ro.completions]
        # One state per boundary (plus the prompt when s_0 is sampled): (row, prefix length in completion tokens).
        states = [(r, b) for r in range(n) for b in ([0] if not self.s0_from_group else []) + bounds[r]]
        t0 = time.perf_counter()
        value = {}
        extra_tokens = 0
        if states and ctx.max_new_tokens <= 0:
            raise ValueError("vineppo needs the generation limit: the method's Context.max_new_tokens is unset")
        if states:
            prefixes = [list(ro.prompts[r // g]) + list(ro.completions[r][:b]) for r, b in states]
            per_call = {"prompts_per_call": self.vine_prompts_per_call} if self.vine_prompts_per_call else {}
            out = ctx.sample(prefixes, num_samples=k, max_new_tokens=ctx.max_new_tokens - min(b for _, b in states),
                             **per_call)
            cont = out.completions()
            texts, examples = [], []
            for j, (r, b) in enumerate(states):
                for i in range(k):
                    ids = list(ro.completions[r][:b]) + list(cont[j * k + i][:ctx.max_new_tokens - b])
                    extra_tokens += len(ids) - b
                    texts.append(ctx.tokenizer.decode(ids, skip_special_tokens=True))
                    examples.append(ro.examples[r // g])
            scores = np.asarray(ctx.reward(texts, examples).scores, np.float32).reshape(len(states), k)
            value = {s: float(v) for s, v in zip(states, scores.mean(axis=1))}
        rewards = np.asarray(ro.rewards, np.float32)
        vals = []
        for r in range(n):
            v0 = float(rewards[r // g].mean()) if self.s0_from_group else value[(r, 0)]
            vals.append([v0] + [value[(r, b)] for b in bounds[r]])
        metrics = {"vine/boundaries_per_seq": float(np.mean([len(b) for b in bounds])),
                   "vine/extra_tokens": float(extra_tokens), "vine/extra_seconds": time.perf_counter() - t0}
        return bounds, vals, metrics

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        rewards, metrics = shaped_rewards(rollouts, self.loss, ctx.max_new_tokens)
        bounds, vals, cost = self.values(rollouts, ctx)
        flat = rewards.reshape(-1)
        adv = [step_advantages(len(c), b, v, flat[r])
               for r, (c, b, v) in enumerate(zip(rollouts.completions, bounds, vals))]
        metrics.update(cost)
        metrics["vine/value_mean"] = float(np.mean([np.mean(v) for v in vals]))
        metrics["vine/adv_abs_mean"] = float(np.mean([np.abs(a).mean() for a in adv if len(a)] or [0.0]))
        batch, row_metrics = solve_rows(rollouts, adv, self.loss, pad_id=ctx.pad_id)
        return batch, {**metrics, **row_metrics}


class VinePPOV(RLV, VinePPO):
    """VinePPO^V: VinePPO's solve rows plus RL^V's verify rows in one update (MRO: RLV -> VinePPO -> GRPO)."""

    name = "vineppo_v"
    tasks = ("solve", "verify")
