"""What the testbed tasks (graph_path, graph_colour, latin_square) share, written once: the reward from a task's
parser and checker, wrong solutions drawn in the policy's measured error mix, and the warm-up rows of the
auxiliary formats (RL^V verify rows, CURE critiques, CIPO corrections) built from each task's own instances.

A task module describes itself with a `TestbedTask` and forwards to these functions; docs/tasks/testbed.md.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.data.prompts import (CORRECTION_FORMATS, CRITIQUE_FORMATS, VERIFY_NO, VERIFY_YES, correction_prompt,
                                       critique_prompt, guided_prompt, parse_critique, verify_prompt)
from jaxrl_reason.rewards.base import RewardResult


class TestbedTask(NamedTuple):
    """A testbed task's pieces; an *answer* is the task's parsed solution (a path, a colouring, a grid)."""

    source: str  # the data source name, written into each row's meta
    gold: Callable[[Example], Any]  # the example's right answer
    solution_text: Callable[[Any], str]  # answer -> the worked-solution text
    parse: Callable[[str], Any]  # model text -> answer, or None
    error_kind: Callable[[str, Any], Optional[str]]  # (question, answer) -> first violated constraint, None if right
    answer_text: Callable[[Any], str]  # answer -> the short form logged as "extracted"
    inject_error: Callable[[Example, str, np.random.Generator], Any]  # a wrong answer of the named kind
    inject_weights: Mapping[str, float]  # the policy's measured error mix that injected kinds follow
    critique_text: Callable[[str, Any, Optional[str]], str]  # (question, answer, kind) -> the four-field critique
    can_inject: Callable[[Example, str], bool] = lambda e, kind: True  # a kind this instance admits
    # (question, answer or None, copies) -> the worked check written before the verdict (verify_format
    # "worked_check": each line copies what it compares, then its mark; "mark_check", copies=False: the marks alone)
    check_text: Optional[Callable[..., str]] = None
    # a wrong answer spread like the policy's own (several positions off, inject_extent="spread"), or None
    inject_spread: Optional[Callable[[Example, np.random.Generator], Any]] = None


TestbedTask.__test__ = False  # pytest: not a test class


def text_error_kind(task: TestbedTask, question: str, text: str) -> Optional[str]:
    """The first constraint a completion's answer violates, None when it is right."""
    return task.error_kind(question, task.parse(text))


def check(task: TestbedTask, question: str, text: str) -> bool:
    """The exact checker: True iff the completion's answer is right."""
    return text_error_kind(task, question, text) is None


def reward(task: TestbedTask, texts: Sequence[str], examples: Sequence[Example]) -> RewardResult:
    """1 for a right answer; details name the violated constraint (`error_kind`). Never raises on model output."""
    scores, details = [], []
    for text, e in zip(texts, examples):
        a = task.parse(text)
        kind = task.error_kind(e.question, a)
        scores.append(float(kind is None))
        details.append({"error_kind": kind or "none", "extracted": task.answer_text(a) if a else None})
    return RewardResult(np.asarray(scores, np.float32), details)


VERIFY_FORMATS = ("verdict", "worked_check", "mark_check")
CHECK_FORMATS = ("worked_check", "mark_check")  # the formats whose verify target is a written check, then the verdict
# The testbed tasks by data source: each module describes itself as a TestbedTask named TASK
TASK_MODULES = {"graph_path": "jaxrl_reason.data.graph_path", "graph_colour": "jaxrl_reason.data.graph_colour",
                "latin_square": "jaxrl_reason.data.latin_square"}


def task_of(source: str) -> TestbedTask:
    """The TestbedTask of a data source in TASK_MODULES (imported on first use)."""
    import importlib

    if source not in TASK_MODULES:
        raise ValueError(f"data.source={source!r} is not a testbed task; use {' | '.join(TASK_MODULES)}")
    return importlib.import_module(TASK_MODULES[source]).TASK


def written_check(task: TestbedTask, question: str, answer: Any, *, knob: str, value: str, instead: str,
                  copies: bool = True) -> str:
    """The task's worked check of `answer`, for a target whose format `knob` = `value` writes one; refuses a task
    without a check, naming the knob and its value without one (`instead`)."""
    if task.check_text is None:
        raise ValueError(f"{knob}={value!r} needs a task with a worked check; {task.source} has none "
                         f"(use {knob}={instead!r})")
    return task.check_text(question, answer, copies=copies)


def verify_target(task: TestbedTask, question: str, text: str, verify_format: str = "verdict") -> str:
    """The verify row's target: the verdict alone ("verdict", docs/methods/rlv.md#spec-training), or the task's worked
    check of the answer, a line break and the verdict ("worked_check", each check line copying what it compares;
    "mark_check", the lines' marks alone: [choices], docs/tasks/testbed.md)."""
    verdict = VERIFY_YES if check(task, question, text) else VERIFY_NO
    if verify_format == "verdict":
        return verdict
    if verify_format not in CHECK_FORMATS:
        raise ValueError(f"verify_format={verify_format!r} is unknown; use {' | '.join(VERIFY_FORMATS)}")
    lines = written_check(task, question, task.parse(text), knob="verify_format", value=verify_format,
                          instead="verdict", copies=verify_format == "worked_check")
    return f"{lines}\n{verdict}"


def check_then(task: TestbedTask, question: str, answer: Any, target: str, *, knob: str, value: str,
               known: Sequence[str], plain: str) -> str:
    """`target` as it is when `knob` = `value` is its `plain` format; with "worked_check", the task's worked check
    of `answer` (every line copying what it compares), a line break, then `target`."""
    if value == plain:
        return target
    if value not in known:
        raise ValueError(f"{knob}={value!r} is unknown; use {' | '.join(known)}")
    return f"{written_check(task, question, answer, knob=knob, value=value, instead=plain)}\n{target}"


def critique_target(task: TestbedTask, question: str, answer: Any, kind: Optional[str],
                    critique_format: str = "fields") -> str:
    """A critique row's target: the task's four-field critique ("fields", docs/methods/cure.md#spec-critique), or its
    worked check of the answer, a line break and those fields ("worked_check", [choice], docs/methods/cure.md)."""
    return check_then(task, question, answer, task.critique_text(question, answer, kind), knob="critique_format",
                      value=critique_format, known=CRITIQUE_FORMATS, plain="fields")


def correction_target(task: TestbedTask, question: str, attempt: Any, solution: str,
                      correction_format: str = "solution") -> str:
    """A correction row's target: the solution it should end with ("solution",
    docs/methods/cipo.md#spec-the-two-streams), or the task's worked check of the earlier attempt (the parsed
    `attempt`), a line break and that solution ("worked_check", [choice], docs/methods/cipo.md)."""
    return check_then(task, question, attempt, solution, knob="correction_format", value=correction_format,
                      known=CORRECTION_FORMATS, plain="solution")


def correction_parts(task: TestbedTask, question: str, attempt: str, reply: str) -> tuple[str, str]:
    """(the opening check, the solution) of a "worked_check" correction `reply` of the completion `attempt`, read
    in `correction_target`'s layout: the check is as many lines as the task's check of that attempt. A reply no
    longer than that check is all check, and its solution the whole reply."""
    check_lines = written_check(task, question, task.parse(attempt), knob="correction_format", value="worked_check",
                                instead="solution").count("\n") + 1
    lines = reply.strip().split("\n")
    return "\n".join(lines[:check_lines]), ("\n".join(lines[check_lines:]) if len(lines) > check_lines else reply)


def correction_solution(task: TestbedTask, question: str, attempt: str, reply: str) -> str:
    """The solution a "worked_check" correction `reply` ends with (`correction_parts`): what the next correction
    round reviews, as training's corrections review a solution, never a check."""
    return correction_parts(task, question, attempt, reply)[1]


def critique_check(task: TestbedTask, question: str, text: str) -> str:
    """The worked check a "worked_check" critique of the completion `text` opens with (CURE forces it, with the
    verdict after it, as the start of the critique it trains)."""
    return written_check(task, question, task.parse(text), knob="critique_format", value="worked_check",
                         instead="fields")


INJECT_EXTENTS = ("minimal", "spread")


def injected_wrong(task: TestbedTask, e: Example, rng: np.random.Generator,
                   extent: str = "minimal") -> tuple[Any, str]:
    """(a wrong answer, its kind). extent "minimal": the kind drawn from `inject_weights` over the kinds this
    instance admits, and the smallest error of that kind (one or two positions); "spread": the task's
    `inject_spread`, an answer off in as many positions as the policy's own wrong answers, its kind the first
    constraint it violates."""
    if extent == "spread":
        if task.inject_spread is None:
            raise ValueError(f"{task.source}: no spread injector; use inject_extent='minimal'")
        wrong = task.inject_spread(e, rng)
        kind = task.error_kind(e.question, wrong)
        if kind is None:
            raise AssertionError(f"{task.source}: inject_spread returned a right answer for {e.id!r}")
        return wrong, kind
    if extent != "minimal":
        raise ValueError(f"inject extent {extent!r} is unknown; use {' | '.join(INJECT_EXTENTS)}")
    kinds = [k for k in task.inject_weights if task.can_inject(e, k)]
    if not kinds:
        raise ValueError(f"{task.source}: example {e.id!r} admits none of the error kinds {list(task.inject_weights)}")
    p = np.asarray([task.inject_weights[k] for k in kinds], float)
    kind = kinds[int(rng.choice(len(kinds), p=p / p.sum()))]
    return task.inject_error(e, kind, rng), kind


def bound(task: TestbedTask) -> tuple:
    """(text_error_kind, check, verify_target, injected_wrong, auxiliary_rows, reward) with `task` bound: what a
    task module exports under its own names."""
    return tuple(functools.partial(f, task) for f in (text_error_kind, check, verify_target, injected_wrong,
                                                       auxiliary_rows, reward))


def auxiliary_rows(task: TestbedTask, examples: Sequence[Example], *, verify: int, critique: int, correct: int,
                   seed: int, verify_format: str = "verdict", inject_extent: str = "minimal",
                   guided: int = 0, guided_layout: str = "after", critique_format: str = "fields",
                   correction_format: str = "solution", prompt_wording: str = "short") -> list[Example]:
    """Warm-up rows of the auxiliary formats, each an Example whose `question` is the whole rendered user turn and
    whose `solution` is the target: `verify` RL^V rows (half right, half wrong solutions; target "Yes"/"No"),
    `critique` CURE critiques (half of wrong solutions, half of right ones), `correct` CIPO corrections (a
    wrong attempt -> the worked solution) and `guided` CURE guided re-solves (the problem and the hint of the
    critique of a wrong attempt, the attempt not shown -> the worked solution). Examples are cycled when a count
    exceeds them. `verify_format` as in `verify_target`; the wrong solutions are
    `injected_wrong(..., extent=inject_extent)`; `guided_layout` as in `prompts.guided_prompt`; `critique_format`
    as in `critique_target`, `correction_format` as in `correction_target`; `prompt_wording` as in
    `prompts.critique_prompt`."""
    if min(verify, critique, correct, guided) < 0:
        raise ValueError("auxiliary_rows: counts must be >= 0")
    if not examples and verify + critique + correct + guided:
        raise ValueError("auxiliary_rows: no examples to build auxiliary rows from")
    rng = np.random.default_rng(seed)
    meta = lambda fmt, **kw: {"source": task.source, "format": fmt, **kw}  # noqa: E731
    pick = lambda i: examples[i % len(examples)]  # noqa: E731
    rows = []
    for i in range(verify):
        e = pick(i)
        sol = task.solution_text(task.gold(e) if i % 2 == 0 else injected_wrong(task, e, rng, inject_extent)[0])
        rows.append(Example(verify_prompt(e.question, sol), "", f"{e.id}/verify{i}",
                            verify_target(task, e.question, sol, verify_format), meta("verify")))
    for i in range(critique):
        e = pick(verify + i)
        a, kind = (task.gold(e), None) if i % 2 == 0 else injected_wrong(task, e, rng, inject_extent)
        rows.append(Example(critique_prompt(e.question, task.solution_text(a), critique_format, prompt_wording), "",
                            f"{e.id}/critique{i}", critique_target(task, e.question, a, kind, critique_format),
                            meta("critique")))
    for i in range(correct):
        e = pick(verify + critique + i)
        a, _ = injected_wrong(task, e, rng, inject_extent)
        rows.append(Example(correction_prompt(e.question, task.solution_text(a), correction_format), e.answer,
                            f"{e.id}/correct{i}", correction_target(task, e.question, a, e.solution, correction_format),
                            meta("correct", question=e.question)))
    for i in range(guided):
        e = pick(verify + critique + correct + i)
        a, kind = injected_wrong(task, e, rng, inject_extent)
        hint = critique_hint(task, e.question, a, kind)
        rows.append(Example(guided_prompt(e.question, hint, guided_layout, prompt_wording), e.answer,
                            f"{e.id}/guided{i}", e.solution,
                            meta("guided", question=e.question)))
    return rows


CHECK_ROWS = ("verify", "critique", "correction")  # the prompt a contrast pair's check is written under


def check_pairs(task: TestbedTask, examples: Sequence[Example], *, seed: int, verify_format: str = "worked_check",
                inject_extent: str = "minimal", rows_as: str = "verify") -> list[Example]:
    """Per example two rows whose target is the task's written check then the verdict: its worked solution, then a
    wrong one drawn in the policy's measured error mix (`injected_wrong`). Within a pair the question predicts
    nothing, so the verdict has to come from reading the solution; the check-warm-up's rows
    (`train.check_warmup`). `rows_as` "verify": verify rows (`verify_target` in `verify_format`); "critique":
    critique rows in the "worked_check" critique format (`critique_target`: the check, then the four fields);
    "correction": correction rows in the "worked_check" correction format (`correction_target`: the check of the
    attempt, then the worked solution -- the right attempt kept, the wrong one corrected)."""
    if rows_as not in CHECK_ROWS:
        raise ValueError(f"check_pairs: rows_as={rows_as!r} is unknown; use {' | '.join(CHECK_ROWS)}")
    if rows_as == "verify" and verify_format not in CHECK_FORMATS:
        raise ValueError(f"check_pairs: verify_format={verify_format!r} writes no check; use "
                         f"{' | '.join(CHECK_FORMATS)}")
    rng, rows = np.random.default_rng(seed), []
    for e in examples:
        wrong, kind = injected_wrong(task, e, rng, inject_extent)
        for tag, sol, answer, k in (("right", e.solution, task.parse(e.solution), None),
                                    ("wrong", task.solution_text(wrong), wrong, kind)):
            meta = {"source": task.source, "format": rows_as, "question": e.question, "solution": sol,
                    "right": k is None}
            if rows_as == "verify":
                rows.append(Example(verify_prompt(e.question, sol), "", f"{e.id}/check_{tag}",
                                    verify_target(task, e.question, sol, verify_format), meta))
            elif rows_as == "correction":
                rows.append(Example(correction_prompt(e.question, sol, "worked_check"), e.answer,
                                    f"{e.id}/check_{tag}",
                                    correction_target(task, e.question, answer, e.solution, "worked_check"), meta))
            else:
                rows.append(Example(critique_prompt(e.question, sol, "worked_check"), "", f"{e.id}/check_{tag}",
                                    critique_target(task, e.question, answer, k, "worked_check"), meta))
    return rows


def critique_hint(task: TestbedTask, question: str, answer: Any, kind: Optional[str]) -> str:
    """The HIGH_LEVEL_HINT of the task's own critique of `answer` (a strategy when `kind` is None): what a critic
    that read the answer right hands CURE's guided re-solve."""
    return parse_critique(task.critique_text(question, answer, kind)).hint


def longest_critique(task: TestbedTask, examples: Sequence[Example], count_tokens: Callable[[str], int], *,
                     seed: int = 0, extent: str = "minimal") -> int:
    """The most tokens (`count_tokens(text)`) any of the task's critique targets takes over `examples`: the
    critique of an injected wrong answer and of the worked solution of each. A critique budget below it cuts the
    longest critiques before their hint, so they do not parse."""
    rng = np.random.default_rng(seed)
    longest = 0
    for e in examples:
        wrong, kind = injected_wrong(task, e, rng, extent)
        for answer, k in ((wrong, kind), (task.parse(e.solution), None)):
            longest = max(longest, count_tokens(task.critique_text(e.question, answer, k)))
    return longest


def own_attempt_rows(task: TestbedTask, attempts: Sequence[tuple[Example, str]], *, critique: bool, correct: bool,
                     seed: int, keep_share: float = 0.0, guided: bool = False,
                     guided_layout: str = "after", critique_format: str = "fields",
                     correction_format: str = "solution", prompt_wording: str = "short") -> list[Example]:
    """Warm-up rows from the policy's *own* attempts (`(example, generated text)`, graded here by the task's
    checker), in the layout of `auxiliary_rows`: for `correct`, one CIPO correction per distinct wrong attempt
    (the attempt verbatim, as CIPO's replay prompt holds it -> the worked solution); for `critique`, one CURE
    critique per distinct wrong attempt whose error is of a kind the task critiques (its `inject_weights` kinds;
    an unreadable answer has no row to quote) and as many of the right attempts (`ERROR_FOUND: false`), drawn
    with `seed`; for `correct` with `keep_share` > 0, also round(keep_share x the correction rows) distinct right
    attempts, each its own target (a right answer under review is kept: CIPO's successful sources, which the wrong-only
    rows never show); for `guided`, one CURE guided re-solve per critiqued wrong attempt (the problem and that
    critique's hint, the attempt not shown -> the worked solution). Injected wrong answers are easier to fix than the
    policy's own (docs/results/cipo_testbed.md); these rows teach the formats on the errors RL and test time will
    show them. `critique_format` as in `critique_target`, `correction_format` as in `correction_target`."""
    if not (critique or correct or guided):
        raise ValueError("own_attempt_rows: ask for critique, correct and/or guided rows")
    meta = lambda fmt, **kw: {"source": task.source, "format": fmt, "attempt": "own", **kw}  # noqa: E731
    seen, wrong, right = set(), [], []
    for e, text in attempts:
        if (e.question, text) in seen:
            continue
        seen.add((e.question, text))
        answer = task.parse(text)
        kind = task.error_kind(e.question, answer)
        (right if kind is None else wrong).append((e, text, answer, kind))
    rows = []
    if correct:
        for i, (e, text, answer, _) in enumerate(wrong):
            if not e.solution:
                raise ValueError(f"own_attempt_rows: a correction row needs the worked solution; example {e.id!r} "
                                 "has none")
            rows.append(Example(correction_prompt(e.question, text, correction_format), e.answer,
                                f"{e.id}/own_correct{i}",
                                correction_target(task, e.question, answer, e.solution, correction_format),
                                meta("correct", question=e.question)))
        n_keep = min(len(right), int(round(keep_share * len(wrong))))
        for i in sorted(np.random.default_rng(seed + 1).permutation(len(right))[:n_keep]):
            e, text, answer = right[i][:3]
            rows.append(Example(correction_prompt(e.question, text, correction_format), e.answer, f"{e.id}/own_keep{i}",
                                correction_target(task, e.question, answer, text, correction_format),
                                meta("correct", question=e.question, source_right=True)))
    flawed = [w for w in wrong if w[3] in task.inject_weights]
    if guided:
        for i, (e, _, answer, kind) in enumerate(flawed):
            hint = critique_hint(task, e.question, answer, kind)
            rows.append(Example(guided_prompt(e.question, hint, guided_layout, prompt_wording), e.answer,
                                f"{e.id}/own_guided{i}",
                                e.solution, meta("guided", question=e.question)))
    if critique:
        rng = np.random.default_rng(seed)
        keep = rng.permutation(len(right))[:len(flawed)]
        for i, (e, text, answer, kind) in enumerate(flawed + [right[j] for j in sorted(keep)]):
            rows.append(Example(critique_prompt(e.question, text, critique_format, prompt_wording), "",
                                f"{e.id}/own_critique{i}",
                                critique_target(task, e.question, answer, kind, critique_format), meta("critique")))
    return rows
