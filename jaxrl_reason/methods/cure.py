"""CURE (docs/methods/cure.md#spec): solve, critique with a teacher-forced verdict, guided re-exploration, replay.

One training iteration, from the step's solve rollouts (Q queries x K samples, accuracy acc(x)); the rules follow
the authors' code (a verl fork); docs/methods/cure.md lists our choices and every departure, with its knob:

1. critique rows: a fixed-size batch (`critique_batch_size`, default Q*K/2), half of wrong samples, half of
   correct ones, filled in the authors' order (`select_critique_rows`). The prompt is `critique_prompt(x, y)`; the
   response starts with the outcome verifier's verdict `critique_verdict_prefix(y is wrong)` (teacher-forced) and
   the policy writes the remaining fields after it. [choice] With a worked check (`RowFormats.critique_check`, data
   .critique_format "worked_check") the forced start is the task's check of y, then the verdict: the outcome
   verifier's judgement written out line by line, trained with the verdict's fixed advantage.
2. guided re-exploration: for each critique of a *wrong* y, `guided_samples` (M) solutions of
   `guided_prompt(x, hint)` -- the hint only, never y -- rewarded by the same verifier.
3. three PPO-clip tasks, by default each normalised over its own tokens and summed (the paper's text;
   `task_pooling="pooled"`: one term over all of them, the authors' code):
   solve         the K samples, plus the successful guided solutions of queries with acc(x) in
                 `replay_acc_range` re-attached to the *plain* solve prompt as extra group members, at most K per
                 query; advantages on the enlarged group; their pi_old recomputed under the plain prompt.
   critique      per-token advantage by segment: `verdict_advantage` on the forced verdict tokens; on the
                 generated rest c * (g + pen - acc(x)) for a critique of a wrong sample (g: mean guided
                 correctness, pen: format penalty, acc(x) from the K plain samples only) and min(pen, 0) for one of
                 a correct sample.
   guided_solve  one group per (x, hint) over its M samples.

[choice] acc(x) and the guided mean use correctness (reward > 0.5); group advantages use the raw rewards.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import jax
import numpy as np

from jaxrl_reason.data.prompts import (critique_format_penalty, critique_prompt, critique_verdict_prefix,
                                       guided_prompt, parse_critique)
from jaxrl_reason.data.testbed import TASK_MODULES, longest_critique, task_of
from jaxrl_reason.methods.base import Context, Rollouts, generate_rollouts, join_rows
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, group_advantages
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.buckets import power_of_two
from jaxrl_reason.rl.batch import TASKS, TokenBatch, build_token_batch
from jaxrl_reason.rl.importance import truncated_is_weights
from jaxrl_reason.rl.losses import TermSpec
from jaxrl_reason.rl.scoring import completion_logprobs

CURE_TASKS = ("solve", "critique", "guided_solve")
# The paper run's loss: each task averaged over its own tokens, clip 0.2 / 0.28, dual-clip 10, no KL.
PAPER_LOSS = PolicyLossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.28, dual_clip=10.0, beta=0.0)
TASK_POOLINGS = ("per_task", "pooled")
# Knobs of the earlier balanced selection, and what replaces them.
REMOVED_KNOBS = {
    "critique_balance": "the critique batch is always half wrong / half right; set its size with critique_batch_size",
    "critique_priority": "the fill order is the authors' (docs/methods/cure.md); it has no knob",
    "max_critiques": "use critique_batch_size (the fixed number of critiques per step)",
    "guided_layout": "set data.guided_layout instead (the warm-up's guided rows, the method and test-time refinement "
                     "read the one knob)",
}


# ------------------------------------------------------------------------------------------------ pure pieces


def query_accuracy(rewards: np.ndarray) -> np.ndarray:
    """[Q, K] rewards -> float [Q]: the share of a query's samples that are correct (reward > 0.5)."""
    rewards = np.asarray(rewards, np.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [queries, samples], got shape {rewards.shape}")
    return (rewards > 0.5).mean(axis=1)


def _check_range(name: str, r) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in r)
    except (TypeError, ValueError):
        raise ValueError(f"cure {name} must be a pair (low, high) of accuracies in [0, 1], got {r!r}") from None
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"cure {name}=({lo}, {hi}) must satisfy 0 <= low <= high <= 1")
    return lo, hi


def in_range(acc: np.ndarray, acc_range) -> np.ndarray:
    """bool [Q]: acc within the closed interval (a 1e-6 slack, so 0.9 admits 9/10 despite float rounding)."""
    lo, hi = acc_range
    acc = np.asarray(acc, np.float64)
    return (acc >= lo - 1e-6) & (acc <= hi + 1e-6)


class CritiquePools(NamedTuple):
    """Flat sample indices (row r = query r // K) by the pool the critique batch draws them from."""

    pairs: np.ndarray  # [P, 2]: (first wrong, first correct) sample of each mixed query in the interval
    zero_heads: np.ndarray  # the first sample of each zero-pass query
    zero_rest: np.ndarray  # the other samples of zero-pass queries
    mixed_wrong: np.ndarray  # wrong samples of mixed queries in the interval, pairs excluded
    mixed_correct: np.ndarray  # correct samples of mixed queries in the interval, pairs excluded
    solved: np.ndarray  # samples of fully solved queries

    def wrong(self) -> np.ndarray:
        return np.concatenate([self.pairs[:, 0], self.zero_heads, self.zero_rest, self.mixed_wrong])

    def correct(self) -> np.ndarray:
        return np.concatenate([self.pairs[:, 1], self.mixed_correct, self.solved])


def critique_pools(rewards: np.ndarray, acc_range) -> CritiquePools:
    """The authors' pools. Zero-pass and fully solved queries are pools of their own whatever `acc_range` says;
    the interval selects the mixed queries (0 < acc(x) < 1) whose samples may be critiqued."""
    acc = query_accuracy(rewards)
    q, k = np.shape(rewards)
    correct = np.asarray(rewards, np.float32) > 0.5
    mixed_ok = in_range(acc, acc_range)
    pools: dict[str, list] = {f: [] for f in CritiquePools._fields}
    for qi in range(q):
        rows = qi * k + np.arange(k)
        if acc[qi] == 0.0:
            pools["zero_heads"].append(rows[0])
            pools["zero_rest"].extend(rows[1:])
        elif acc[qi] == 1.0:
            pools["solved"].extend(rows)
        elif mixed_ok[qi]:
            right, wrong = rows[correct[qi]], rows[~correct[qi]]
            pools["pairs"].append((wrong[0], right[0]))
            pools["mixed_correct"].extend(right[1:])
            pools["mixed_wrong"].extend(wrong[1:])
    out = {f: np.asarray(v, np.int64) for f, v in pools.items()}
    out["pairs"] = out["pairs"].reshape(-1, 2)
    return CritiquePools(**out)


def _draw(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n rows from `pool`: a random subset when it holds enough; else all of it plus random repeats."""
    pool = np.asarray(pool, np.int64)
    if n <= 0 or not len(pool):
        return np.zeros((0,), np.int64)
    if n <= len(pool):
        return rng.choice(pool, size=n, replace=False)
    return np.concatenate([pool, rng.choice(pool, size=n - len(pool), replace=True)])


def _top_up(taken: np.ndarray, candidates: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n more rows of one class for a batch that its pools left short: unused candidates first, then repeats."""
    if n <= 0 or not len(candidates):
        return np.zeros((0,), np.int64)
    unused = np.setdiff1d(candidates, taken)
    first = rng.choice(unused, size=min(n, len(unused)), replace=False) if len(unused) else unused
    return np.concatenate([first, rng.choice(candidates, size=n - len(first), replace=True)]).astype(np.int64)


def select_critique_rows(rewards: np.ndarray, acc_range, batch_size: int, rng: np.random.Generator, *,
                         zero_pass_floor: float = 0.125) -> np.ndarray:
    """Flat sample indices (row r = query r // K) of the `batch_size` critiques of a step, sorted; a sample may
    appear more than once (each occurrence is its own critique).

    The authors' order: first one (wrong, correct) pair of every mixed query in `acc_range`; the rest is split
    half wrong (the odd slot), half correct.
      wrong:   the first sample of every zero-pass query; wrong samples of mixed queries, leaving room for at
               least `zero_pass_floor * batch_size` zero-pass samples in all; more zero-pass samples to fill.
      correct: correct samples of mixed queries; samples of fully solved queries to fill.
    A pool drawn past its size repeats samples. A class still short (the zero-pass or solved pool is empty) is
    topped up from its other candidates -- our departure, so the batch keeps its size; a class with no candidate
    at all stays empty.
    """
    if int(batch_size) < 0:
        raise ValueError(f"cure critique_batch_size must be >= 0 (0 = half the solve samples), got {batch_size}")
    if not 0.0 <= zero_pass_floor <= 1.0:
        raise ValueError(f"cure critique_zero_pass_floor must be a share of the critique batch in [0, 1], "
                         f"got {zero_pass_floor}")
    p = critique_pools(rewards, acc_range)
    pairs = p.pairs[rng.permutation(len(p.pairs))].reshape(-1)  # wrong first: an odd cut keeps the wrong one
    if batch_size <= len(pairs):
        return np.sort(pairs[:batch_size])
    rest = int(batch_size) - len(pairs)
    n_wrong, n_right = rest - rest // 2, rest // 2

    if len(p.zero_heads) >= n_wrong:  # more zero-pass queries than wrong slots: a random subset of them
        wrong = _draw(p.zero_heads, n_wrong, rng)
    else:
        zero_total = max(len(p.zero_heads), int(round(zero_pass_floor * batch_size)))
        n_mixed = min(len(p.mixed_wrong), max(0, n_wrong - zero_total))
        wrong = np.concatenate([p.zero_heads, _draw(p.mixed_wrong, n_mixed, rng),
                                _draw(p.zero_rest, n_wrong - len(p.zero_heads) - n_mixed, rng)])
    wrong = np.concatenate([wrong, _top_up(np.concatenate([pairs, wrong]), p.wrong(), n_wrong - len(wrong), rng)])

    n_mixed = min(len(p.mixed_correct), n_right)
    right = np.concatenate([_draw(p.mixed_correct, n_mixed, rng), _draw(p.solved, n_right - n_mixed, rng)])
    right = np.concatenate([right, _top_up(np.concatenate([pairs, right]), p.correct(), n_right - len(right), rng)])
    return np.sort(np.concatenate([pairs, wrong, right]).astype(np.int64))


def replay_members(critique_query: Sequence[int], guided_correct: np.ndarray, replay_ok: np.ndarray,
                   cap: Optional[int]) -> list:
    """Per query, the (guided group, sample) pairs replayed into its solve group: the successful guided
    solutions of the critiques of its samples (guided group gi belongs to the critique of a sample of query
    `critique_query[gi]`), for queries with `replay_ok`, in critique order, at most `cap` (None = all)."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(len(replay_ok))]
    for gi, qi in enumerate(critique_query):
        if replay_ok[qi]:
            out[qi].extend((gi, int(s)) for s in np.flatnonzero(guided_correct[gi]))
    return out if cap is None else [r[:cap] for r in out]


class ReplayAdvantages(NamedTuple):
    """base: [Q, K] advantages of the plain samples; replay: per query, one advantage per replayed sample;
    rewards / valid / advantages: the enlarged groups as the estimator saw them, [Q, K + padding]."""

    base: np.ndarray
    replay: list
    rewards: np.ndarray
    valid: np.ndarray
    advantages: np.ndarray


def replay_group_advantages(rewards: np.ndarray, replay_rewards: Sequence[Sequence[float]], estimator: str,
                            **estimator_kwargs) -> ReplayAdvantages:
    """Advantages of solve groups enlarged by replayed samples: query q's group is its K samples plus
    `replay_rewards[q]` (possibly none); the estimator sees the ragged groups through its `valid` mask."""
    rewards = np.asarray(rewards, np.float32)
    q, k = rewards.shape
    if len(replay_rewards) != q:
        raise ValueError(f"replay_rewards has {len(replay_rewards)} entries for {q} queries; give one list per query")
    extra = max((len(r) for r in replay_rewards), default=0)
    width = k + (power_of_two(extra, 1) if extra else 0)  # few estimator shapes
    full = np.zeros((q, width), np.float32)
    valid = np.zeros((q, width), bool)
    full[:, :k], valid[:, :k] = rewards, True
    for i, r in enumerate(replay_rewards):
        full[i, k:k + len(r)] = np.asarray(r, np.float32)
        valid[i, k:k + len(r)] = True
    adv = np.asarray(adv_lib.compute_advantages(estimator, full, valid, **estimator_kwargs))
    return ReplayAdvantages(adv[:, :k], [adv[i, k:k + len(r)] for i, r in enumerate(replay_rewards)], full, valid,
                            adv)


def critique_rest_advantage(guided_correct: Optional[Sequence[float]], acc: float, *, scale: float,
                            format_penalty: float) -> float:
    """The advantage of a critique's generated tokens. The critique's reward is the mean guided correctness g plus
    the format penalty; for a critique of a wrong sample the advantage is scale * (g + penalty - acc(x)), for one
    of a correct sample (`guided_correct` None: no guided solutions) the penalty if negative, else 0."""
    if guided_correct is None:
        return float(min(format_penalty, 0.0))
    g = np.asarray(guided_correct, np.float64)
    if g.size == 0:
        raise ValueError("critique_rest_advantage: a critique of a wrong sample needs at least one guided solution")
    return float(scale * (g.mean() + format_penalty - acc))


def segment_advantages(n_verdict: int, n_rest: int, verdict_advantage: float, rest_advantage: float) -> np.ndarray:
    """float32 [n_verdict + n_rest]: the forced verdict tokens, then the generated rest."""
    return np.concatenate([np.full((n_verdict,), verdict_advantage, np.float32),
                           np.full((n_rest,), rest_advantage, np.float32)])


# ------------------------------------------------------------------------------------------------ the method


class _Critiques(NamedTuple):
    rows: np.ndarray  # flat solve-sample index of each critique
    prompts: list  # rendered critique prompt ids, without the verdict
    verdicts: list  # forced ids: the verdict, after the worked check when the critique opens with one
    generated: list  # generated ids after the verdict
    logprobs: list  # sampler log-probs of `generated` (pi_old)
    sampling_logprobs: list  # sampler log q of `generated` (the truncated distribution)
    texts: list  # verdict + generated, decoded
    wrong: np.ndarray  # bool: the critiqued sample is wrong (verdict "true")


class _Exploration(NamedTuple):
    """What one CURE step sampled beyond the rollouts (`CURE._explore`)."""

    rows: np.ndarray  # flat solve-sample index of each critique
    crit: Optional[_Critiques]  # the critiques (None: no sample chosen)
    parsed: list  # each critique's parsed fields
    penalties: list  # each critique's format penalty
    w_idx: list  # indices into `rows` of the critiques of wrong samples, which got guided re-solves
    g_prompts: list  # guided prompt ids, one per critique in w_idx
    g_comps: list  # guided solutions, guided_samples per prompt
    g_lps: list  # their sampler log-probs (pi_old)
    g_qs: list  # their sampler log q
    g_scores: np.ndarray  # [len(w_idx), guided_samples] rewards
    g_correct: np.ndarray  # g_scores > 0.5
    replay: list  # per query: the (guided prompt, sample) pairs that replay into its group
    flat_replay: list  # (query, guided prompt, sample) of every replayed solution
    group_size: int  # K, the rollouts' samples per query


class CURE(GRPO):
    """Solve + critique + guided-solve rows with CURE's replay and hybrid critique advantages."""

    name = "cure"
    tasks = CURE_TASKS
    # Replay makes zero-pass groups (all rewards 0) the groups CURE learns most from: dynamic sampling, which
    # drops them, must be refused (the trainer checks this).
    uses_zero_signal_groups = True
    # Tool rows: the plain solve samples keep their environment masks, replayed guided solutions are the model's
    # own text; critiques and guided re-solves are single-turn samples without tools, the critique's prompt
    # holding the transcript (docs/methods/multi_turn.md#training-and-warm-up).
    trains_tool_rows = True
    removed_knobs = REMOVED_KNOBS  # read_method_config names the replacement of a removed method.extra key
    default_loss = PAPER_LOSS
    part = "critique"  # critique, guided re-solve and replay: one part, off when both its weights are 0

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, *,
                 guided_samples: int = 4, critique_batch_size: int = 0, critique_acc_range: tuple = (0.0, 0.9),
                 critique_zero_pass_floor: float = 0.125, replay_acc_range: tuple = (0.0, 0.0),
                 max_replay_per_query: int = 0, critique_advantage_scale: float = 2.0,
                 verdict_advantage: float = 1.0, critique_max_new_tokens: int = 0, guided_max_new_tokens: int = 0,
                 format_penalty_missing: float = -0.5, format_penalty_short_hint: float = -0.25,
                 min_hint_words: int = 10, task_pooling: str = "per_task", critique_weight: float = 1.0,
                 guided_weight: float = 1.0, rescore_rows: int = 16, rescore_chunk: int = 0,
                 **estimator_kwargs):
        """Knobs (docs/methods/cure.md#spec names; defaults are the paper run's and the authors' code's):

        guided_samples:            M, guided solutions per critique of a wrong sample
        critique_batch_size:       critiques per step, half of wrong samples, half of correct ones (0 = half the
                                   step's solve samples, the paper's 256 per 128 x 4)
        critique_acc_range:        (lo, hi): mixed queries (0 < acc < 1) whose samples may be critiqued
        critique_zero_pass_floor:  share of the critique batch kept for zero-pass samples before mixed wrong ones
                                   (the authors' 32 of 256)
        replay_acc_range:          (lo, hi): queries whose successful guided solutions join the solve group
        max_replay_per_query:      cap on replayed samples per query (0 = K, the authors' cap; -1 = none)
        critique_advantage_scale:  c in c * (g + format penalty - acc(x))
        verdict_advantage:         the fixed advantage of the teacher-forced verdict tokens
        critique_max_new_tokens:   generation budget of a critique after its verdict (and its forced check); 0 =
                                   the trainer's max_new_tokens, as the authors' run gives critiques its whole
                                   response budget (4,096; docs/methods/cure.md)
        guided_max_new_tokens:     budget of a guided solution (0 = the trainer's max_new_tokens)
        format_penalty_missing / format_penalty_short_hint / min_hint_words: the critique format penalty
        task_pooling:              per_task (each task's loss averaged over its own tokens, summed: the paper)
                                   | pooled (one term over all tasks' tokens: the authors' code)
        critique_weight / guided_weight: coefficients of the critique and guided_solve terms and of their KL
                                   (solve: 1); per_task only
        rescore_rows / rescore_chunk: rows per forward and time chunk (0 = none) when recomputing pi_old
        """
        removed = sorted(set(estimator_kwargs) & set(REMOVED_KNOBS))
        if removed:
            raise ValueError("; ".join(f"cure {k} was removed: {REMOVED_KNOBS[k]}" for k in removed))
        super().__init__(estimator, loss, **estimator_kwargs)
        if self.loss.overlong_buffer or self.loss.overlong_filter:
            raise ValueError("cure does not apply DAPO's overlong shaping or filter (its critique and guided rows "
                             "have their own budgets); set method.overlong_buffer=0 and method.overlong_filter=False")
        if int(guided_samples) < 1:
            raise ValueError(f"cure guided_samples (M) must be >= 1, got {guided_samples}")
        if int(critique_max_new_tokens) < 0:
            raise ValueError(f"cure critique_max_new_tokens must be >= 0 (0 = the trainer's max_new_tokens), got "
                             f"{critique_max_new_tokens}")
        if int(guided_max_new_tokens) < 0 or int(critique_batch_size) < 0:
            raise ValueError("cure guided_max_new_tokens and critique_batch_size must be >= 0 (0 = the default), "
                             f"got {guided_max_new_tokens}, {critique_batch_size}")
        if int(max_replay_per_query) < -1:
            raise ValueError(f"cure max_replay_per_query must be >= 1, 0 (= K, the group size) or -1 (no cap), "
                             f"got {max_replay_per_query}")
        if not 0.0 <= float(critique_zero_pass_floor) <= 1.0:
            raise ValueError(f"cure critique_zero_pass_floor must be a share of the critique batch in [0, 1], "
                             f"got {critique_zero_pass_floor}")
        if format_penalty_missing > 0 or format_penalty_short_hint > 0:
            raise ValueError("cure format_penalty_missing and format_penalty_short_hint are penalties: give values "
                             f"<= 0, got {format_penalty_missing}, {format_penalty_short_hint}")
        if critique_weight < 0 or guided_weight < 0:
            raise ValueError(f"cure critique_weight and guided_weight must be >= 0, got {critique_weight}, "
                             f"{guided_weight}")
        if task_pooling not in TASK_POOLINGS:
            raise ValueError(f"cure task_pooling={task_pooling!r} is unknown; use one of {TASK_POOLINGS}")
        if task_pooling == "pooled" and (critique_weight != 1.0 or guided_weight != 1.0):
            raise ValueError("cure task_pooling='pooled' trains one PPO-clip term over all three tasks, so it cannot "
                             f"weight them: critique_weight and guided_weight must be 1 (got {critique_weight}, "
                             f"{guided_weight}); use task_pooling='per_task' to weight the tasks")
        self.guided_samples = int(guided_samples)
        self.critique_batch_size = int(critique_batch_size)
        self.critique_acc_range = _check_range("critique_acc_range", critique_acc_range)
        self.critique_zero_pass_floor = float(critique_zero_pass_floor)
        self.replay_acc_range = _check_range("replay_acc_range", replay_acc_range)
        self.max_replay_per_query = int(max_replay_per_query)
        self.critique_advantage_scale = float(critique_advantage_scale)
        self.verdict_advantage = float(verdict_advantage)
        self.critique_max_new_tokens = int(critique_max_new_tokens)
        self.guided_max_new_tokens = int(guided_max_new_tokens)
        self.format_penalty_missing = float(format_penalty_missing)
        self.format_penalty_short_hint = float(format_penalty_short_hint)
        self.min_hint_words = int(min_hint_words)
        self.task_pooling = task_pooling
        self.critique_weight, self.guided_weight = float(critique_weight), float(guided_weight)
        self.rescore_rows, self.rescore_chunk = int(rescore_rows), int(rescore_chunk) or None

    def check(self, config, task, tokenizer) -> None:
        """Fails before any training when a run on a testbed task gives its critiques fewer new tokens than the
        task's own critiques take under this tokenizer: those would be cut before their hint and fail to parse."""
        super().check(config, task, tokenizer)
        data = config.data
        if data.source not in TASK_MODULES:
            return

        def after_verdict(text: str) -> int:  # the budget counts what follows the teacher-forced verdict line
            for w in (True, False):
                text = text.removeprefix(critique_verdict_prefix(w))
            return len(tokenizer.encode(text))

        need = longest_critique(task_of(data.source), task.train[:32], after_verdict, seed=config.seed,
                                extent=data.inject_extent)
        budget = self.critique_max_new_tokens or config.rl.max_new_tokens
        if need > budget:
            shown = self.critique_max_new_tokens or f"0 (= rl.max_new_tokens, {config.rl.max_new_tokens})"
            raise ValueError(f"config method.extra.critique_max_new_tokens={shown} is shorter "
                             f"than a {data.source} critique after its verdict line under this tokenizer (up to {need} "
                             f"tokens): such critiques would be cut before their hint and fail to parse; set it to at "
                             f"least {need}, or train the BPE on the critique rows (tokenizer.aux_corpus=True) to "
                             "shorten them")

    @property
    def active(self) -> bool:
        """Whether the part runs: with both its weights at 0 nothing is critiqued, re-solved or replayed."""
        return bool(self.critique_weight or self.guided_weight)

    def terms(self) -> tuple[TermSpec, ...]:
        """The solve terms of the classes below (GRPO's "pg" and, with beta > 0, "kl"), then per_task: a PPO-clip
        term per CURE task of weight > 0, then (beta > 0) a KL term per such task in its aggregation, weighted
        beta * the task's weight (the KL sits inside the task's loss, as in the GRPO objective). pooled: one
        PPO-clip and one KL term over all three tasks, in place of the solve terms."""
        base = super().terms()
        if not self.active:
            return base
        if self.task_pooling == "pooled":
            return self.loss.terms(CURE_TASKS) + tuple(x for x in base if x.name not in ("pg", "kl"))
        t = sum((self.loss.terms((task,), name=task, kl_name=f"{task}_kl", weight=w)
                 for task, w in (("critique", self.critique_weight), ("guided_solve", self.guided_weight)) if w), ())
        # Policy terms first, then the KL terms, as CURE alone always ordered them (the sum's order is its bits).
        return tuple(x for x in base + t if x.kind != "kl") + tuple(x for x in base + t if x.kind == "kl")

    def critique_sizes(self, queries: int, group_size: int) -> tuple[int, int]:
        """(critiques, guided prompts) of a step of `queries` x `group_size` rollouts at most: the critique batch
        has its fixed size (samples repeat when the pools are short), and at most its wrong half, ceil(size / 2)
        (`select_critique_rows` cuts every share wrong-first), gets guided re-solves. What the sampler is called
        with; the compile check sizes its critique and guided executables by it."""
        critiques = self.critique_batch_size or (queries * group_size) // 2
        return critiques, -(-critiques // 2)

    def _replay_cap(self, group_size: int) -> Optional[int]:
        """Replayed samples allowed per query: K by default (the authors' min(#successes, group size))."""
        if self.max_replay_per_query == 0:
            return group_size
        return None if self.max_replay_per_query == -1 else self.max_replay_per_query

    # -------------------------------------------------------------------------------------- generation steps

    def _critique(self, ro: Rollouts, rows: np.ndarray, ctx: Context) -> _Critiques:
        tok, g = ctx.tokenizer, ro.group_size
        wrong = ro.rewards.reshape(-1)[rows] <= 0.5
        fmt = "fields" if ctx.formats.critique_check is None else "worked_check"
        questions = [ro.examples[r // g].question for r in rows]
        wording = ctx.formats.prompt_wording
        texts = [tok.render_prompt(critique_prompt(q, ro.texts[r], fmt, wording)) for q, r in zip(questions, rows)]
        prompts = tok.encode_ragged(texts)
        # The forced start, encoded on its own (not merged with the prompt's last token): the same ids the model
        # must produce by itself at test time.
        heads = [critique_verdict_prefix(bool(w)) for w in wrong]
        if ctx.formats.critique_check is not None:
            heads = [f"{ctx.formats.critique_check(q, ro.texts[r])}\n{h}" for q, r, h in zip(questions, rows, heads)]
        verdicts = [tok.encode(h) for h in heads]
        kw = {"max_new_tokens": self.critique_max_new_tokens} if self.critique_max_new_tokens else {}
        out = generate_rollouts(ctx.sample, tok, [p + v for p, v in zip(prompts, verdicts)],
                                [ro.examples[r // g] for r in rows], num_samples=1, **kw)
        generated, logprobs, sampling = list(out.completions), list(out.logprobs), list(out.sampling_logprobs)
        full = [h + r for h, r in zip(heads, out.texts)]
        return _Critiques(rows, prompts, verdicts, generated, logprobs, sampling, full, wrong)

    def _guided(self, ro: Rollouts, examples: list, hints: list, ctx: Context):
        m = self.guided_samples
        tok = ctx.tokenizer
        prompts = tok.encode_ragged([tok.render_prompt(guided_prompt(e.question, h, ctx.formats.guided_layout,
                                                                   ctx.formats.prompt_wording))
                                     for e, h in zip(examples, hints)])
        kw = {"max_new_tokens": self.guided_max_new_tokens} if self.guided_max_new_tokens else {}
        out = generate_rollouts(ctx.sample, tok, prompts, examples, num_samples=m, reward=ctx.reward, **kw)
        return prompts, list(out.completions), list(out.logprobs), list(out.sampling_logprobs), out.rewards

    # -------------------------------------------------------------------------------------- build

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        """The rows of the classes below (in a union: verify, correct) with their solve rows replaced by CURE's
        (the same samples plus replay, on enlarged groups), then the critique and guided_solve rows."""
        base, base_metrics = super().build(rollouts, ctx)
        if not self.active:
            return base, base_metrics
        ctx = self.part_context(ctx, "critique")
        others = np.asarray(base.task_id) != TASKS["solve"]
        base = jax.tree.map(lambda x: x[others], base)
        ro = rollouts
        q, k = ro.rewards.shape
        if len(ro.completions) != q * k:
            raise ValueError(f"rollouts hold {len(ro.completions)} completions for rewards of shape {(q, k)}")
        if ctx.model is None or ctx.params is None:
            raise ValueError("CURE recomputes pi_old of replayed and teacher-forced tokens: the Context needs "
                             "`model` and the current `params`")
        acc = query_accuracy(ro.rewards)
        # The solve metrics below (enlarged groups) replace those of the plain groups.
        metrics: dict[str, Any] = {**base_metrics, "cure/zero_pass_frac": float(np.mean(acc == 0.0))}
        ex = self._explore(ro, acc, ctx)
        verdict_lps, replay_lps = self._rescore(ro, ex, ctx)
        solve_w, crit_w, guided_w = self._sampled_weights(ro, ex, metrics)
        batches = [base, self._solve_rows(ro, ex, solve_w, replay_lps, ctx, metrics)]
        batches += self._critique_rows(ex, acc, crit_w, verdict_lps, ctx, metrics)
        batches += self._guided_rows(ex, acc, guided_w, ctx, metrics)
        # Tokens this step generated beyond the rollouts (critiques after their forced verdict, guided solutions):
        # what CURE spends over GRPO for the same number of RL steps. A union's parts each log their own and add
        # to the step's total.
        metrics["cure/extra_tokens"] = float(sum(len(x) for x in (ex.crit.generated if ex.crit else []))
                                             + sum(len(x) for x in ex.g_comps))
        metrics["generate/extra_tokens"] = metrics.get("generate/extra_tokens", 0.0) + metrics["cure/extra_tokens"]
        return join_rows(batches), metrics

    def _explore(self, ro: Rollouts, acc: np.ndarray, ctx: Context) -> "_Exploration":
        """Critiques of the chosen samples, guided re-solves from the hints of critiques of wrong ones, and the
        guided successes that replay into their query's solve group."""
        q, k = ro.rewards.shape
        batch_size, _ = self.critique_sizes(q, k)
        rows = select_critique_rows(ro.rewards, self.critique_acc_range, batch_size, ctx.rng,
                                    zero_pass_floor=self.critique_zero_pass_floor)
        crit = self._critique(ro, rows, ctx) if len(rows) else None
        parsed = [parse_critique(t, min_hint_words=self.min_hint_words) for t in crit.texts] if crit else []
        penalties = [critique_format_penalty(c, missing=self.format_penalty_missing,
                                             short_hint=self.format_penalty_short_hint) for c in parsed]
        w_idx = [j for j in range(len(rows)) if crit.wrong[j]] if crit else []
        guided = None
        if w_idx:
            guided = self._guided(ro, [ro.examples[rows[j] // k] for j in w_idx],
                                  [parsed[j].hint or "" for j in w_idx], ctx)
        g_prompts, g_comps, g_lps, g_qs, g_scores = guided if guided else ([], [], [], [],
                                                                           np.zeros((0, self.guided_samples)))
        g_correct = g_scores > 0.5
        # Replay: successful guided solutions of queries in the replay range join the plain solve group.
        replay = replay_members([int(rows[j] // k) for j in w_idx], g_correct, in_range(acc, self.replay_acc_range),
                                self._replay_cap(k))
        flat_replay = [(qi, gi, s) for qi, r in enumerate(replay) for gi, s in r]
        return _Exploration(rows, crit, parsed, penalties, w_idx, g_prompts, g_comps, g_lps, g_qs, g_scores,
                            g_correct, replay, flat_replay, k)

    def _rescore(self, ro: Rollouts, ex: "_Exploration", ctx: Context) -> tuple[list, list]:
        """pi_old of the forced verdict tokens and of the replayed samples under the plain prompt, in one pass."""
        crit, m = ex.crit, self.guided_samples
        score_p = (list(crit.prompts) if crit else []) + [ro.prompts[qi] for qi, _, _ in ex.flat_replay]
        score_c = (list(crit.verdicts) if crit else []) + [ex.g_comps[gi * m + s] for _, gi, s in ex.flat_replay]
        lps = completion_logprobs(ctx.model, ctx.params, score_p, score_c, pad_id=ctx.pad_id,
                                  rows_per_call=self.rescore_rows, chunk_size=self.rescore_chunk,
                                  temperature=ctx.temperature)
        return lps[:len(ex.rows)], lps[len(ex.rows):]

    def _sampled_weights(self, ro: Rollouts, ex: "_Exploration", metrics: dict) -> tuple[list, list, list]:
        """Truncated importance weights on every sampled token (docs/methods/grpo.md#spec-temperature) of the plain
        solve samples, the critiques' generated rest and the guided solutions. Forced verdicts and replayed samples
        were not sampled from their rows' prompts, so they keep weight 1."""
        crit = ex.crit
        sampled_old = list(ro.logprobs) + (list(crit.logprobs) if crit else []) + list(ex.g_lps)
        if ro.sampling_logprobs is None:
            if self.loss.tis != "off":
                raise ValueError(f"tis={self.loss.tis!r} needs the sampler's log q of every sampled token "
                                 "(Rollouts.sampling_logprobs), which these rollouts do not carry; set tis='off'")
            weights = [np.ones(len(x), np.float32) for x in sampled_old]
        else:
            sampled_q = list(ro.sampling_logprobs) + (list(crit.sampling_logprobs) if crit else []) + list(ex.g_qs)
            weights, tis_metrics = truncated_is_weights(sampled_old, sampled_q, mode=self.loss.tis,
                                                        cap=self.loss.tis_cap)
            metrics.update(tis_metrics)
        n, n_crit = len(ro.completions), len(crit.logprobs) if crit else 0
        return weights[:n], weights[n:n + n_crit], weights[n + n_crit:]

    def _solve_rows(self, ro: Rollouts, ex: "_Exploration", solve_w: list, replay_lps: list, ctx: Context,
                    metrics: dict) -> TokenBatch:
        """The solve task on the replay-enlarged groups."""
        q, k = ro.rewards.shape
        m = self.guided_samples
        replay_rewards = [[float(ex.g_scores[gi, s]) for gi, s in r] for r in ex.replay]
        adv = replay_group_advantages(ro.rewards, replay_rewards, self.estimator, **self.estimator_kwargs)
        prompts = [ro.prompts[r // k] for r in range(q * k)] + [ro.prompts[qi] for qi, _, _ in ex.flat_replay]
        comps = list(ro.completions) + [ex.g_comps[gi * m + s] for _, gi, s in ex.flat_replay]
        advs = ([a * w for a, w in zip(adv.base.reshape(-1), solve_w)] +
                [float(a) for r in adv.replay for a in r])
        olds = list(ro.logprobs) + replay_lps
        metrics.update({f"solve/{n}": float(v) for n, v in
                        adv_lib.group_metrics(adv.rewards, adv.valid, advantages=adv.advantages).items()})
        metrics["replay/rows"] = len(ex.flat_replay)
        metrics["replay/queries"] = int(sum(1 for r in ex.replay if r))
        masks = None
        if ro.token_masks is not None:
            # Multi-turn rows keep their environment tokens out of the loss; a replayed guided solution is the
            # model's own single-turn text, every token of it trained.
            masks = [np.asarray(t, np.float32) for t in ro.token_masks] + [
                np.ones(len(ex.g_comps[gi * m + s]), np.float32) for _, gi, s in ex.flat_replay]
        return build_token_batch(prompts, comps, advs, olds, "solve", pad_id=ctx.pad_id, completion_masks=masks)

    def _critique_rows(self, ex: "_Exploration", acc: np.ndarray, crit_w: list, verdict_lps: list, ctx: Context,
                       metrics: dict) -> list:
        """The critique task, its advantage hybrid by segment: the forced verdict's, then the rest's from the
        guided re-solves (none at critique_weight 0: the critiques only give the guided re-solve its hints)."""
        rows, crit, k = ex.rows, ex.crit, ex.group_size
        metrics["critique/rows"] = len(rows)
        metrics["critique/repeated_rows"] = int(len(rows) - len(np.unique(rows)))
        metrics["critique/zero_pass_rows"] = int(np.sum(acc[rows // k] == 0.0)) if len(rows) else 0
        if not crit:
            return []
        g_of = {j: gi for gi, j in enumerate(ex.w_idx)}
        c_adv, rest_adv = [], []
        for j, r in enumerate(rows):
            guided_c = ex.g_correct[g_of[j]] if j in g_of else None
            a = critique_rest_advantage(guided_c, float(acc[r // k]), scale=self.critique_advantage_scale,
                                        format_penalty=ex.penalties[j])
            rest_adv.append(a)
            seg = segment_advantages(len(crit.verdicts[j]), len(crit.generated[j]), self.verdict_advantage, a)
            seg[len(crit.verdicts[j]):] *= crit_w[j]
            c_adv.append(seg)
        ok = np.array([not c.format_errors for c in ex.parsed])
        metrics.update({
            "critique/wrong_frac": float(crit.wrong.mean()),
            "critique/format_ok_frac": float(ok.mean()),
            "critique/format_penalty_mean": float(np.mean(ex.penalties)),
            "critique/hint_words_mean": float(np.mean([c.hint_words for c in ex.parsed])),
            "critique/rest_advantage_mean": float(np.mean(rest_adv)),
            "critique/length_mean": float(np.mean([len(x) for x in crit.generated])),
        })
        if not self.critique_weight:
            return []
        c_comps = [v + gen for v, gen in zip(crit.verdicts, crit.generated)]
        c_olds = [np.concatenate([vl, gl]) for vl, gl in zip(verdict_lps, crit.logprobs)]
        return [build_token_batch(crit.prompts, c_comps, c_adv, c_olds, "critique", pad_id=ctx.pad_id)]

    def _guided_rows(self, ex: "_Exploration", acc: np.ndarray, guided_w: list, ctx: Context,
                     metrics: dict) -> list:
        """The guided_solve task: GRPO per (question, hint) group (none at guided_weight 0: the guided solutions
        then only score the critiques and feed the replay)."""
        metrics["guided_solve/rows"] = len(ex.g_comps) if self.guided_weight else 0
        if not ex.g_comps:
            return []
        m, k = self.guided_samples, ex.group_size
        g_adv = group_advantages(ex.g_scores, self.estimator, **self.estimator_kwargs)
        out = []
        if self.guided_weight:
            out.append(build_token_batch([ex.g_prompts[i // m] for i in range(len(ex.g_comps))], ex.g_comps,
                                         [a * w for a, w in zip(g_adv.reshape(-1), guided_w)], ex.g_lps,
                                         "guided_solve", pad_id=ctx.pad_id))
        metrics.update({f"guided_solve/{n}": float(v) for n, v in
                        adv_lib.group_metrics(ex.g_scores, advantages=g_adv).items()})
        metrics["guided_solve/accuracy"] = float(ex.g_correct.mean())
        zp = [gi for gi, j in enumerate(ex.w_idx) if acc[ex.rows[j] // k] == 0.0]
        if zp:
            metrics["guided_solve/zero_pass_accuracy"] = float(ex.g_correct[zp].mean())
        return out

    # No host state of its own: every step is a function of its own rollouts (GRPO's state_dict, or a union's).
