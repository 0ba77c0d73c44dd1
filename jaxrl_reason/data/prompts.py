"""Every prompt template of jaxrl_reason, as plain functions returning the *user message* text.

Rendering through a chat template is the tokenizer's job (`Tokenizer.render_prompt(user_text)`); nothing here
knows about tokens. The exact phrases the method specs (docs/methods/README.md) fix are module constants so that tests,
verifiers and evaluation scripts refer to one spelling:

  SOLVE_INSTRUCTION  "Please reason step by step, and put your final answer within \\boxed{}."
                     (docs/methods/cure.md#spec-solve)
  VERIFY_QUESTION    "Is this solution correct? Answer Yes or No." (docs/methods/rlv.md#spec-training)
  CRITIQUE_FIELDS    ERROR_FOUND, ERROR_QUOTE, WHY_IT_MATTERS, HIGH_LEVEL_HINT (docs/methods/cure.md#spec-critique)
"""
from __future__ import annotations

import re
from typing import Any, Callable, NamedTuple, Sequence

SOLVE_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
VERIFY_QUESTION = "Is this solution correct? Answer Yes or No."
VERIFY_YES = "Yes"
VERIFY_NO = "No"
CRITIQUE_FIELDS = ("ERROR_FOUND", "ERROR_QUOTE", "WHY_IT_MATTERS", "HIGH_LEVEL_HINT")
CODE_INSTRUCTION = ("Write a complete Python program that solves the problem. Give your final program in exactly "
                    "one fenced code block that starts with ```python and ends with ```.")


def _text(value: object, field: str, template: str, *, model_output: bool = False) -> str:
    """Checks a template field. Fields that come from the model (solutions, attempts, hints) may be empty — an
    empty generation is a legitimate (wrong) sample and must not crash a training step; dataset fields may not."""
    if not isinstance(value, str):
        raise TypeError(f"{template}: `{field}` must be a str, got {type(value).__name__}; "
                        "decode token ids to text before building prompts.")
    text = value.strip()
    if not text and not model_output:
        raise ValueError(f"{template}: `{field}` is empty; an example with no {field} cannot be prompted.")
    return text


def _fenced(code: str, lang: str = "python") -> str:
    """A fenced block whose fence is longer than any backtick run inside `code`, so the code cannot close it."""
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{code}\n{fence}"


# ----------------------------------------------------------------------------------------------------------------
# Solve / verify (GRPO, RL^V)
# ----------------------------------------------------------------------------------------------------------------
def solve_prompt(question: str) -> str:
    """The question, then the boxed-answer instruction (docs/methods/cure.md#spec-solve)."""
    return f"{_text(question, 'question', 'solve_prompt')}\n\n{SOLVE_INSTRUCTION}"


def verify_prompt(question: str, solution: str) -> str:
    """RL^V verification (docs/methods/rlv.md#spec-training): problem, solution, then exactly VERIFY_QUESTION. The
    target is the single token VERIFY_YES or VERIFY_NO as the start of the assistant's reply."""
    q = _text(question, "question", "verify_prompt")
    s = _text(solution, "solution", "verify_prompt", model_output=True)
    return f"Problem:\n{q}\n\nSolution:\n{s}\n\n{VERIFY_QUESTION}"


# ----------------------------------------------------------------------------------------------------------------
# CURE: critique and guided re-exploration (docs/methods/cure.md#spec)
# ----------------------------------------------------------------------------------------------------------------
# What the critique prompt asks for in each field; a reply that copies one back is not a critique (parse_critique).
CRITIQUE_FIELD_DESCRIPTIONS = {
    "ERROR_FOUND": "true or false",
    "ERROR_QUOTE": "the shortest snippet of the solution that contains the error (none if there is no error)",
    "WHY_IT_MATTERS": "why this error changes the final answer (none if there is no error)",
    "HIGH_LEVEL_HINT": "a strategy for solving the problem correctly; not the next step and not the answer",
}


# What a critique's reply holds [choice] (docs/methods/cure.md): "fields" is the paper's -- the four fields, the
# verdict first; "worked_check" (testbed tasks with a written check) opens the reply with the task's check of the
# solution, one line per constraint, so the verdict that follows reads the marks the critic just wrote.
CRITIQUE_FORMATS = ("fields", "worked_check")


# How the CURE prompts are worded [choice] (data.prompt_wording, docs/methods/cure.md): "short" is this library's
# two-sentence wording; "authors" gives every instruction of the authors' templates (their fork's
# verl/utils/cure_utils.py), written in our words: a missing final answer is an error, the earliest of chained
# errors is the one, a hint is written even when there is no error, and the hint names no number, symbol or line.
PROMPT_WORDINGS = ("short", "authors")

# The authors' critique instructions, one per line, in our words (the order and the content are theirs).
_AUTHORS_CRITIQUE_STEPS = (
    "You are shown a problem and a solution that an AI wrote for it.",
    "",
    "What to do:",
    "1) Read the problem, then the whole solution from its first line to its last.",
    "2) Find the one earliest step or claim whose error carries through to the final answer.",
    "   - Errors that are fixed later, or that never reach the final answer, do not count.",
    "   - A solution that never states a final answer has an error: treat the missing answer as one.",
    "   - When one error leads to others, pick the first of them.",
    "   - When no error reaches the final answer, write ERROR_FOUND: false and go straight to step 5.",
    "3) Quote the shortest piece of the solution that holds that error.",
    "4) Say in one or two sentences why it changes the final answer.",
    "5) Write a general hint that would help a student avoid this kind of error (when there is one) or make sure "
    "of a right answer (when the solution is right).",
    "   - The hint must not give the next step, nor the answer.",
    "   - It must suit this problem and be about strategy, but name no specific number, symbol or line of the "
    "solution.",
    "",
    "Rules:",
    "- Do not solve the problem and do not rewrite the solution.",
    "- The hint stands on its own: no particular calculation, no fix aimed at one spot.",
    "- Write a hint even when ERROR_FOUND is false, about the approach as a whole.",
    "- Write all four fields below, in this order.",
)


def _check_wording(wording: str, fn: str) -> None:
    if wording not in PROMPT_WORDINGS:
        raise ValueError(f"{fn}: wording={wording!r} is unknown; use {' | '.join(PROMPT_WORDINGS)} "
                         "(config data.prompt_wording)")


def critique_prompt(question: str, solution: str, critique_format: str = "fields", wording: str = "short") -> str:
    """Asks for the earliest answer-changing error in `solution`, in the four CRITIQUE_FIELDS, one per line;
    with `critique_format="worked_check"`, after a line-by-line check of the solution. `wording` is one of
    PROMPT_WORDINGS: "authors" gives the authors' instructions before the same fields."""
    q = _text(question, "question", "critique_prompt")
    s = _text(solution, "solution", "critique_prompt", model_output=True)
    if critique_format not in CRITIQUE_FORMATS:
        raise ValueError(f"critique_prompt: critique_format={critique_format!r} is unknown; use "
                         f"{' | '.join(CRITIQUE_FORMATS)}")
    _check_wording(wording, "critique_prompt")
    fields = "\n".join(f"{f}: {CRITIQUE_FIELD_DESCRIPTIONS[f]}" for f in CRITIQUE_FIELDS)
    reply = "Reply with exactly these four fields, in this order, each starting on its own line:\n"
    if critique_format == "worked_check":
        reply = ("First check the solution, one line per constraint, each marked ok or naming what fails. Then "
                 "reply with exactly these four fields, in this order, each starting on its own line:\n")
    if wording == "authors":
        return (
            f"{_AUTHORS_CRITIQUE_STEPS[0]}\n\n"
            f"Problem:\n{q}\n\n"
            f"Solution:\n{s}\n\n"
            + "\n".join(_AUTHORS_CRITIQUE_STEPS[2:]) + "\n\n"
            f"{reply}{fields}"
        )
    return (
        "Review the solution to the problem below. Find the earliest error that affects the final answer.\n\n"
        f"Problem:\n{q}\n\n"
        f"Solution:\n{s}\n\n"
        f"{reply}{fields}"
    )


def critique_verdict_prefix(error_found: bool) -> str:
    """The teacher-forced first line of a critique (docs/methods/cure.md#spec-critique): the outcome verifier's verdict,
    written as the start of the assistant's reply; the model generates the remaining fields after it."""
    if not isinstance(error_found, bool):
        raise TypeError(f"critique_verdict_prefix: `error_found` must be a bool, got {type(error_found).__name__}.")
    return f"ERROR_FOUND: {'true' if error_found else 'false'}\n"


# Where the hint stands in the guided prompt [choice] (docs/methods/cure.md): "after" is the paper's and the
# authors' layout (problem, guidance, instruction); "first" puts the guidance before an unchanged solve prompt, so
# the problem sits at the same distance from the answer as in a plain solve.
GUIDED_LAYOUTS = ("after", "first")


def guided_prompt(question: str, hint: str, layout: str = "after", wording: str = "short") -> str:
    """Guided re-exploration (docs/methods/cure.md#spec-guided-re-exploration): the problem and the critique's
    hint only — the earlier attempt is deliberately not shown, so the new solution is a fresh attempt rather than
    an edit. `layout` is one of GUIDED_LAYOUTS; `wording` one of PROMPT_WORDINGS ("authors": their four
    instructions, in our words, before the problem and the hint; with layout "first" the same instructions stand
    before the plain solve prompt)."""
    q = _text(question, "question", "guided_prompt")
    h = _text(hint, "hint", "guided_prompt", model_output=True)
    _check_wording(wording, "guided_prompt")
    if wording == "authors":
        task = ("You are shown a problem and a hint.\n\n"
                "What to do:\n"
                "1. Write a new solution to the problem.\n"
                "2. Follow the hint's advice closely, but never mention the hint in what you write.\n"
                "3. Keep the reasoning consistent, clear and sound.\n"
                "4. Give the whole solution, step by step.")
        if layout == "after":
            return f"{task}\n\nProblem:\n{q}\n\nHint:\n{h}\n\n{SOLVE_INSTRUCTION}"
        if layout == "first":
            return f"{task}\n\nHint:\n{h}\n\n{solve_prompt(q)}"
    if layout == "after":
        return (
            f"{q}\n\n"
            f"Guidance for solving this problem:\n{h}\n\n"
            "Write a new, complete solution that uses this guidance. Do not mention the guidance or that you were "
            f"given it. {SOLVE_INSTRUCTION}"
        )
    if layout == "first":
        return (
            f"Guidance for solving the problem below:\n{h}\n\n"
            "Write a new, complete solution that uses this guidance. Do not mention the guidance or that you were "
            "given it.\n\n"
            f"{solve_prompt(q)}"
        )
    raise ValueError(f"guided_prompt: layout must be one of {GUIDED_LAYOUTS}, got {layout!r}")


class Critique(NamedTuple):
    """A parsed critique. Fields are None when absent; `format_errors` lists what was wrong with the format
    (empty when the critique is well-formed). `hint_words` counts the words of the hint (0 when absent)."""

    error_found: bool | None
    quote: str | None
    why: str | None
    hint: str | None
    format_errors: tuple[str, ...]
    hint_words: int


# A field label at the start of a line, tolerating markdown the model may add: bullets, bold, headers.
_FIELD_RE = re.compile(
    r"^[ \t>*#\-]*\**[ \t]*(ERROR_FOUND|ERROR_QUOTE|WHY_IT_MATTERS|HIGH_LEVEL_HINT)[ \t]*\**[ \t]*:[ \t]*\**",
    re.IGNORECASE | re.MULTILINE)
# The hint label anywhere in the text (CURE's authors look for it anywhere, not only at a line start).
_HINT_RE = re.compile(r"HIGH_LEVEL_HINT[ \t]*\**[ \t]*:[ \t]*\**", re.IGNORECASE)
_NONE_VALUES = {"", "none", "n/a", "na", "null", "-", "nothing", "no error"}
_TRUE_VALUES = {"true", "yes", "1"}
_FALSE_VALUES = {"false", "no", "0"}
# CURE's format rules (docs/methods/cure.md#spec-rewards-and-advantages, as the authors' code checks them).
MIN_HINT_WORDS = 10
MIN_QUOTE_CHARS = 5


def _clean(value: str) -> str:
    value = value.strip().strip("*").strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'`":
        value = value[1:-1].strip()
    return value


def _same_words(a: str, b: str) -> bool:
    words = lambda t: re.sub(r"[^a-z0-9 ]+", " ", t.lower()).split()  # noqa: E731
    return words(a) == words(b)


def _none_to_empty(value: str | None) -> str | None:
    if value is None:
        return None
    return "" if value.lower().rstrip(".") in _NONE_VALUES else value


def parse_critique(text: str, *, min_hint_words: int = MIN_HINT_WORDS,
                   min_quote_chars: int = MIN_QUOTE_CHARS) -> Critique:
    """Parses a critique written in the CRITIQUE_FIELDS format. Never raises on model output.

    ERROR_FOUND, ERROR_QUOTE and WHY_IT_MATTERS run from their label (at a line start) to the next label, so they
    may span lines; when a label repeats, the first occurrence counts -- the first ERROR_FOUND is the
    teacher-forced one. The hint is the text after the *last* `HIGH_LEVEL_HINT:`, wherever it stands, to the end
    (the authors' extraction: a model that restates its critique is judged by its final hint).

    Format errors reported: `missing <FIELD>`, `bad ERROR_FOUND value`; `empty ERROR_QUOTE` when an error is
    claimed and the quote has fewer than `min_quote_chars` characters; `empty HIGH_LEVEL_HINT` and
    `short HIGH_LEVEL_HINT` (fewer than `min_hint_words` words) for *every* critique -- a hint is asked for even
    when there is no error; `template <FIELD>` when a field repeats the prompt's description of it
    (CRITIQUE_FIELD_DESCRIPTIONS) word for word, and `bad ERROR_FOUND value` for "true or false" -- stricter than
    the authors' checks, which accept a copied template (measured: SmolLM2-135M-Instruct, primed with the verdict
    label, copies all four descriptions back; docs/results/smollm2_critique.md).
    """
    if not isinstance(text, str):
        text = ""
    matches = list(_FIELD_RE.finditer(text))
    hint_labels = list(_HINT_RE.finditer(text))
    # A value ends at the next field label, or at a hint label even in mid-line.
    boundaries = sorted({m.start() for m in matches} | {m.start() for m in hint_labels} | {len(text)})
    values: dict[str, str] = {}
    for m in matches:
        name = m.group(1).upper()
        if name not in values and name != "HIGH_LEVEL_HINT":
            end = next(b for b in boundaries if b >= m.end())
            values[name] = _clean(text[m.end():end])
    if hint_labels:
        values["HIGH_LEVEL_HINT"] = _clean(text[hint_labels[-1].end():])
    errors = [f"missing {f}" for f in CRITIQUE_FIELDS if f not in values]

    for f in CRITIQUE_FIELDS[1:]:
        if f in values and _same_words(values[f], CRITIQUE_FIELD_DESCRIPTIONS[f]):
            errors.append(f"template {f}")  # the prompt's description copied back, not written
    error_found = None
    if "ERROR_FOUND" in values:
        words = [w.strip(".,;:*").lower() for w in values["ERROR_FOUND"].split()]
        verdict = words[0] if words else ""
        # "true or false" (the prompt's own wording copied back) names both verdicts: it is no verdict.
        both = any(w in _TRUE_VALUES for w in words) and any(w in _FALSE_VALUES for w in words)
        if verdict in _TRUE_VALUES and not both:
            error_found = True
        elif verdict in _FALSE_VALUES and not both:
            error_found = False
        else:
            errors.append("bad ERROR_FOUND value")

    quote, why, hint = (_none_to_empty(values.get(f)) for f in ("ERROR_QUOTE", "WHY_IT_MATTERS", "HIGH_LEVEL_HINT"))
    hint_words = len(hint.split()) if hint else 0
    if error_found and quote is not None and len(quote) < min_quote_chars:
        errors.append("empty ERROR_QUOTE")
    if hint == "":
        errors.append("empty HIGH_LEVEL_HINT")
    elif hint is not None and hint_words < min_hint_words:
        errors.append("short HIGH_LEVEL_HINT")
    return Critique(error_found, quote, why, hint, tuple(errors), hint_words)


def critique_format_penalty(critique: Critique, *, missing: float = -0.5, short_hint: float = -0.25) -> float:
    """CURE's format penalty (docs/methods/cure.md#spec-rewards-and-advantages), the authors' two rules: `missing` when
    ERROR_QUOTE or WHY_IT_MATTERS is absent or the quote of a claimed error is empty; plus `short_hint` when the hint is
    absent, empty or too short -- for every critique. The verdict is not judged: in training it is teacher-forced, so it
    is always present and right. CURE adds the penalty to the critique's reward."""
    errs = set(critique.format_errors)
    penalty = 0.0
    if errs & {"missing ERROR_QUOTE", "missing WHY_IT_MATTERS", "empty ERROR_QUOTE", "template ERROR_QUOTE",
               "template WHY_IT_MATTERS"}:
        penalty += missing
    if errs & {"missing HIGH_LEVEL_HINT", "empty HIGH_LEVEL_HINT", "short HIGH_LEVEL_HINT", "template HIGH_LEVEL_HINT"}:
        penalty += short_hint
    return penalty


# ----------------------------------------------------------------------------------------------------------------
# CIPO: correction (docs/methods/cipo.md#spec-the-two-streams)
# ----------------------------------------------------------------------------------------------------------------
def correction_prompt(question: str, attempt: str, correction_format: str = "solution") -> str:
    """The query, an earlier attempt (correct or not — the prompt does not say), and an instruction to review it
    and write a corrected complete solution: `replay_correction_prompt` with the boxed-answer instruction."""
    return replay_correction_prompt(question, attempt, correction_format=correction_format)


# What a correction's reply holds [choice] (docs/methods/cipo.md): "solution" is the paper's -- the corrected
# complete solution; "worked_check" (testbed tasks with a written check) opens it with the task's check of the
# earlier attempt, so the rewrite follows the marks the corrector just wrote.
CORRECTION_FORMATS = ("solution", "worked_check")


def replay_correction_prompt(question: str, attempt: str, answer_instruction: str = SOLVE_INSTRUCTION,
                             correction_format: str = "solution") -> str:
    """CIPO's replay prompt for any task: the query, the policy's earlier attempt verbatim (surrounding whitespace
    stripped), the review-and-correct instruction, then `answer_instruction`, the task's own answer format
    (math: SOLVE_INSTRUCTION, the default, which makes this exactly `correction_prompt`; code: CODE_INSTRUCTION).
    With `correction_format="worked_check"` the instruction asks for a line-by-line check of the attempt first."""
    q = _text(question, "question", "replay_correction_prompt")
    a = _text(attempt, "attempt", "replay_correction_prompt", model_output=True)
    fmt = _text(answer_instruction, "answer_instruction", "replay_correction_prompt")
    if correction_format not in CORRECTION_FORMATS:
        raise ValueError(f"replay_correction_prompt: correction_format={correction_format!r} is unknown; use "
                         f"{' | '.join(CORRECTION_FORMATS)}")
    check = ("First check the attempt, one line per constraint, each marked ok or naming what fails. "
             if correction_format == "worked_check" else "")
    return (
        f"{q}\n\n"
        f"Here is an earlier attempt at this problem:\n{a}\n\n"
        f"Review the attempt carefully; it may be correct or it may contain errors. {check}Then write a corrected, "
        f"complete solution. {fmt}"
    )


# ----------------------------------------------------------------------------------------------------------------
# Code
# ----------------------------------------------------------------------------------------------------------------
def code_solve_prompt(problem: str) -> str:
    """A programming problem, then CODE_INSTRUCTION (exactly one fenced python block)."""
    return f"{_text(problem, 'problem', 'code_solve_prompt')}\n\n{CODE_INSTRUCTION}"


def code_correction_prompt(problem: str, buggy_program: str) -> str:
    """DebugBench-style repair: the problem, a program with a bug (fenced so it cannot break out of its block),
    and the request for the full corrected program in exactly one fenced python block."""
    p = _text(problem, "problem", "code_correction_prompt")
    code = _text(buggy_program, "buggy_program", "code_correction_prompt", model_output=True)
    return (
        f"{p}\n\n"
        f"The following program is meant to solve the problem but contains a bug:\n{_fenced(code)}\n\n"
        "Find and fix the bug. Give the full corrected program in exactly one fenced code block that starts "
        "with ```python and ends with ```."
    )


def whole_turn_prompt_fn(turn_rows: Sequence[Any], prompt_fn: Callable[[str], str]) -> Callable[[str], str]:
    """The prompt_fn of an SFT mix whose `turn_rows` (check, critique, correction rows) carry their whole user turn
    as `.question`: those questions pass through as written, every other one gets `prompt_fn`'s template."""
    turns = frozenset(r.question for r in turn_rows)
    return lambda question: question if question in turns else prompt_fn(question)
