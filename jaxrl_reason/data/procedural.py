"""Procedural tasks from the `reasoning-gym` package (offline), and their reward.

Examples keep their reasoning-gym entry (question, answer, metadata) and the dataset settings in `meta`, so the
task's own `score_answer` can grade answers that are not math expressions (a countdown expression is right when
it evaluates to the target with the given numbers, not when it equals the reference string).

Scoring runs in a pool of worker processes with a hard per-item deadline, like the math verifier: scorers parse
model output (some through SymPy) and a reward function must never hang or raise on it.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rewards.math import MathGrader, find_boxed, shared_grader

REASONING_GYM_FLAGS = ("no_answer", "unclosed_box", "timeout", "scorer_error")


def _solution_from_entry(task: str, entry: Mapping[str, Any]) -> str | None:
    """A worked solution ending in `\\boxed{answer}` when the task ships one (gsm_symbolic's `answer_cot`)."""
    cot = entry.get("metadata", {}).get("answer_cot")
    if not isinstance(cot, str) or not cot.strip():
        return None
    lines = [ln for ln in cot.strip().splitlines() if not ln.lstrip().startswith("####")]
    return "\n".join(lines).rstrip() + f"\nThe answer is \\boxed{{{entry['answer']}}}."


def reasoning_gym_examples(task: str, n: int, *, seed: int = 0, config: Mapping[str, Any] | None = None,
                           start: int = 0) -> list[Example]:
    """Examples `start .. start+n-1` of reasoning-gym task `task` (e.g. "basic_arithmetic", "chain_sum",
    "gsm_symbolic", "countdown"), deterministic in (task, seed, config).

    config: extra keyword arguments of the task's config class (e.g. `{"min_terms": 2, "max_terms": 3}`).
    meta: source="reasoning_gym", task, config (everything needed to rebuild the scorer) and entry.
    """
    import reasoning_gym

    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got {n}, {start}.")
    settings = dict(config or {})
    for reserved in ("seed", "size"):
        if reserved in settings:
            raise ValueError(f"pass `{reserved}` as an argument of reasoning_gym_examples, not inside config.")
    try:
        dataset = reasoning_gym.create_dataset(task, seed=seed, size=start + n, **settings)
    except (ValueError, TypeError, AssertionError) as e:
        raise ValueError(f"reasoning-gym task {task!r} with config {settings}: {e}") from e
    out = []
    for i in range(start, start + n):
        entry = dataset[i]
        # JSON round trip: metadata must cross process boundaries and checkpoints as plain data.
        entry = json.loads(json.dumps(entry, default=str))
        answer = entry.get("answer")
        out.append(Example(
            question=str(entry["question"]),
            answer="" if answer is None else str(answer),
            id=f"rg-{task}-{seed}-{i}",
            solution=_solution_from_entry(task, entry),
            meta={"source": "reasoning_gym", "task": task, "config": {**settings, "seed": seed}, "entry": entry},
        ))
    return out


# Worker side: one scorer per (task, config), built on first use in each worker process.
_SCORERS: dict[str, Any] = {}


def _score_in_worker(task: str, config_json: str, answer: str, entry: dict) -> float:
    scorer = _SCORERS.get(task + config_json)
    if scorer is None:
        import reasoning_gym

        settings = json.loads(config_json)
        # Scoring does not depend on the size; size=1 keeps construction cheap.
        scorer = reasoning_gym.create_dataset(task, size=1, **settings).score_answer
        _SCORERS[task + config_json] = scorer
    return float(scorer(answer, entry))


def default_reasoning_gym_grader() -> MathGrader:
    """A process-wide pool whose workers import reasoning-gym up front (closed at interpreter exit)."""
    return shared_grader("reasoning_gym", preload=("reasoning_gym",), timeout_s=5.0)


def reasoning_gym_reward(completions: Sequence[str], examples: Sequence[Example], *, binary: bool = True,
                         timeout_s: float | None = None, grader: MathGrader | None = None) -> RewardResult:
    """Scores the last `\\boxed{}` of each completion with its task's own `score_answer`.

    Args:
      completions: [N] generated texts; examples: [N] reasoning-gym Examples (from `reasoning_gym_examples`).
      binary: 1.0 iff the scorer gives full marks (some scorers give partial credit such as 0.01 for a
        well-formed wrong answer); False passes the raw score through.
      grader: a pool whose workers can import reasoning_gym; default `default_reasoning_gym_grader()`.
    Returns scores float32 [N] and details: extracted, no_answer, unclosed_box, timeout, scorer_error, raw_score.
    """
    if len(completions) != len(examples):
        raise ValueError(f"reasoning_gym_reward got {len(completions)} completions but {len(examples)} examples.")
    for i, ex in enumerate(examples):
        if ex.meta.get("source") != "reasoning_gym" or "entry" not in ex.meta:
            raise ValueError(f"examples[{i}] (id {ex.id!r}) is not a reasoning-gym example; build it with "
                             "reasoning_gym_examples so that meta holds the task and entry.")
    grader = grader or default_reasoning_gym_grader()
    scores = np.zeros([len(completions)], np.float32)
    details: list[dict[str, Any]] = []
    args, rows = [], []
    for i, (completion, ex) in enumerate(zip(completions, examples)):
        boxed = find_boxed(completion)
        details.append({"extracted": boxed.content, "no_answer": not boxed.content and not boxed.unclosed,
                        "unclosed_box": boxed.unclosed, "timeout": False, "scorer_error": False,
                        "raw_score": 0.0})
        if boxed.content:
            config_json = json.dumps(ex.meta.get("config", {}), sort_keys=True)
            args.append((ex.meta["task"], config_json, boxed.content, dict(ex.meta["entry"])))
            rows.append(i)
    for i, outcome in zip(rows, grader.run(_score_in_worker, args, timeout_s=timeout_s)):
        d = details[i]
        if outcome.status == "ok":
            raw = float(outcome.value)
            d["raw_score"] = raw
            scores[i] = (1.0 if raw >= 1.0 - 1e-9 else 0.0) if binary else raw
        elif outcome.status == "timeout":
            d["timeout"] = True
        else:
            d["scorer_error"] = True
            d["error"] = outcome.error
    return RewardResult(scores=scores, details=details)
