"""Built-in arithmetic problems with step-by-step worked solutions, for the CPU default run.

A tiny model cannot learn to *reason* from RL alone; it first needs a format and an algorithm to imitate. Each
example therefore carries a worked solution that applies the school algorithms digit by digit — column addition
with carries, column subtraction with borrows, long multiplication by partial products — rewriting the expression
after every operation and ending in `\\boxed{answer}`. SFT on these teaches both the algorithm and the answer
format that `math_reward` checks; RL then sharpens it.

Examples are deterministic functions of (seed, index): generating example 1000 needs no examples before it, and
the same (seed, index) gives the same example in every process.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example

_COLUMN_NAMES = ("ones", "tens", "hundreds", "thousands", "ten-thousands", "hundred-thousands", "millions",
                 "ten-millions", "hundred-millions", "billions")
_OPS = ("+", "-", "*")
_RNG_TAG = 0x5EED_A817  # keeps these draws independent of other generators seeded with the same seed


def _column(k: int) -> str:
    return _COLUMN_NAMES[k] if k < len(_COLUMN_NAMES) else f"10^{k}"


def _digits(n: int) -> list[int]:
    """Least significant first."""
    return [int(c) for c in reversed(str(n))]


# ----------------------------------------------------------------------------------------------------------------
# Worked algorithms on non-negative integers. Each returns (lines, result).
# ----------------------------------------------------------------------------------------------------------------
def column_addition(a: int, b: int) -> tuple[list[str], int]:
    """`a + b` column by column from the ones, carries written out."""
    if a < 0 or b < 0:
        raise ValueError("column_addition takes non-negative integers.")
    da, db = _digits(a), _digits(b)
    lines = [f"Add {a} and {b} column by column, starting from the ones."]
    carry, out = 0, []
    for k in range(max(len(da), len(db))):
        x = da[k] if k < len(da) else 0
        y = db[k] if k < len(db) else 0
        s = x + y + carry
        terms = f"{x} + {y}" + (f" + {carry} (carry)" if carry else "")
        carry, digit = divmod(s, 10)
        out.append(digit)
        lines.append(f"{_column(k)}: {terms} = {s}, write {digit}" + (f", carry {carry}" if carry else ""))
    if carry:
        out.append(carry)
        lines.append(f"The final carry {carry} becomes the leading digit.")
    result = int("".join(map(str, reversed(out))))
    assert result == a + b
    lines.append(f"So {a} + {b} = {result}.")
    return lines, result


def column_subtraction(a: int, b: int) -> tuple[list[str], int]:
    """`a - b` for `a >= b >= 0`, column by column from the ones, borrows written out."""
    if not a >= b >= 0:
        raise ValueError("column_subtraction needs a >= b >= 0.")
    da, db = _digits(a), _digits(b)
    lines = [f"Subtract {b} from {a} column by column, starting from the ones."]
    borrow, out = 0, []
    for k in range(len(da)):
        x = da[k]
        y = db[k] if k < len(db) else 0
        top = x - borrow
        top_text = f"{x} - {borrow} (borrow) = {top}, " if borrow else ""
        if top < y:
            lines.append(f"{_column(k)}: {top_text}{top} < {y}, borrow 1: {top + 10} - {y} = {top + 10 - y}")
            out.append(top + 10 - y)
            borrow = 1
        else:
            lines.append(f"{_column(k)}: {top_text}{top} - {y} = {top - y}")
            out.append(top - y)
            borrow = 0
    result = int("".join(map(str, reversed(out))))
    assert result == a - b and borrow == 0
    lines.append(f"So {a} - {b} = {result}.")
    return lines, result


def _times_digit(a: int, d: int) -> tuple[list[str], int]:
    lines = [f"Multiply {a} by {d} column by column, starting from the ones."]
    carry, out = 0, []
    for k, x in enumerate(_digits(a)):
        p = x * d + carry
        terms = f"{x} * {d}" + (f" + {carry} (carry)" if carry else "")
        carry, digit = divmod(p, 10)
        out.append(digit)
        lines.append(f"{_column(k)}: {terms} = {p}, write {digit}" + (f", carry {carry}" if carry else ""))
    if carry:
        out.append(carry)
        lines.append(f"The final carry {carry} becomes the leading digit.")
    result = int("".join(map(str, reversed(out))))
    assert result == a * d
    lines.append(f"So {a} * {d} = {result}.")
    return lines, result


def long_multiplication(a: int, b: int) -> tuple[list[str], int]:
    """`a * b` for non-negative integers: one partial product per non-zero digit of `b`, then their sum."""
    if a < 0 or b < 0:
        raise ValueError("long_multiplication takes non-negative integers.")
    if a == 0 or b == 0:
        return [f"Anything times 0 is 0, so {a} * {b} = 0."], 0
    if b < 10:
        return _times_digit(a, b)
    parts = [(k, d) for k, d in enumerate(_digits(b)) if d]
    split = " + ".join(f"{a} * {d * 10**k}" for k, d in reversed(parts))
    lines = [f"Split {b} by place value: {a} * {b} = {split}."]
    partials = []
    for k, d in parts:
        sub_lines, p = _times_digit(a, d)
        lines += sub_lines
        if k:
            lines.append(f"Shift by {k} place{'s' if k > 1 else ''}: {a} * {d * 10**k} = {p * 10**k}.")
        partials.append(p * 10**k)
    total = partials[0]
    for p in partials[1:]:
        sub_lines, total = column_addition(total, p)
        lines += sub_lines
    assert total == a * b
    lines.append(f"So {a} * {b} = {total}.")
    return lines, total


# ----------------------------------------------------------------------------------------------------------------
# Signed operations, reduced to the unsigned algorithms with the sign rule written out
# ----------------------------------------------------------------------------------------------------------------
def _fmt(x: int) -> str:
    return f"({x})" if x < 0 else str(x)


def _add_signed(a: int, b: int) -> tuple[list[str], int]:
    if a >= 0 and b >= 0:
        return column_addition(a, b)
    if a < 0 and b < 0:
        lines, m = column_addition(-a, -b)
        return [f"Both numbers are negative: {a} + {_fmt(b)} = -({-a} + {-b})."] + lines + \
            [f"So {a} + {_fmt(b)} = {-m}."], -m
    p, q = (a, -b) if a >= 0 else (b, -a)  # p >= 0 is the positive term, q its negative partner's size
    head = f"{_fmt(a)} + {_fmt(b)}"
    if p >= q:
        lines, m = column_subtraction(p, q)
        return [f"{head} = {p} - {q}."] + lines + [f"So {head} = {m}."], m
    lines, m = column_subtraction(q, p)
    return [f"{head} = -({q} - {p})."] + lines + [f"So {head} = {-m}."], -m


def _sub_signed(a: int, b: int) -> tuple[list[str], int]:
    head = f"{_fmt(a)} - {_fmt(b)}"
    if a >= b >= 0:
        return column_subtraction(a, b)
    if 0 <= a < b:
        lines, m = column_subtraction(b, a)
        return [f"{a} is less than {b}, so {head} = -({b} - {a})."] + lines + [f"So {head} = {-m}."], -m
    if b < 0:
        lines, m = _add_signed(a, -b)
        return [f"Subtracting a negative number adds it: {head} = {_fmt(a)} + {-b}."] + lines, m
    lines, m = column_addition(-a, b)  # a < 0 <= b
    return [f"{head} = -({-a} + {b})."] + lines + [f"So {head} = {-m}."], -m


def _mul_signed(a: int, b: int) -> tuple[list[str], int]:
    lines, m = long_multiplication(abs(a), abs(b))
    if (a < 0) == (b < 0):
        if a < 0:
            lines = [f"A negative times a negative is positive: {_fmt(a)} * {_fmt(b)} = {-a} * {-b}."] + lines
        return lines, m
    head = f"{_fmt(a)} * {_fmt(b)}"
    return ([f"Exactly one factor is negative, so {head} = -({abs(a)} * {abs(b)})."] + lines +
            [f"So {head} = {-m}."]), -m


_APPLY = {"+": _add_signed, "-": _sub_signed, "*": _mul_signed}


def _render(values: Sequence[int], ops: Sequence[str]) -> str:
    parts = [_fmt(values[0]) if values[0] < 0 else str(values[0])]
    for op, v in zip(ops, values[1:]):
        parts += [op, _fmt(v)]
    return " ".join(parts)


def worked_solution(operands: Sequence[int], ops: Sequence[str]) -> tuple[str, int]:
    """Step-by-step evaluation of `operands[0] ops[0] operands[1] ...` (multiplication first, then left to right),
    ending in `\\boxed{value}`. Returns (text, value)."""
    if len(ops) != len(operands) - 1 or not operands:
        raise ValueError(f"need len(ops) == len(operands) - 1, got {len(ops)} ops for {len(operands)} operands.")
    values, pending = list(operands), list(ops)
    lines: list[str] = []
    step = 0
    while pending:
        # Precedence: the leftmost multiplication if any, else the leftmost operation.
        i = pending.index("*") if "*" in pending else 0
        a, b, op = values[i], values[i + 1], pending[i]
        step += 1
        lines.append(f"Step {step}: {_fmt(a)} {op} {_fmt(b)}.")
        sub_lines, r = _APPLY[op](a, b)
        lines += sub_lines
        values[i:i + 2] = [r]
        del pending[i]
        if pending:
            lines.append(f"Now the expression is {_render(values, pending)}.")
    value = values[0]
    if step == 0:
        lines.append(f"The expression is just the number {value}.")
    lines.append(f"The answer is \\boxed{{{value}}}.")
    return "\n".join(lines), value


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def compact_solution(operands: Sequence[int], ops: Sequence[str]) -> tuple[str, int]:
    """One line per operation (multiplication first, then left to right), each `a op b = r`, then the boxed
    value: a few tokens per step instead of the column algorithm's dozens, for tiny models whose RL budget is
    measured in completion tokens. Returns (text, value)."""
    if len(ops) != len(operands) - 1 or not operands:
        raise ValueError(f"need len(ops) == len(operands) - 1, got {len(ops)} ops for {len(operands)} operands.")
    values, pending = list(operands), list(ops)
    lines: list[str] = []
    while pending:
        i = pending.index("*") if "*" in pending else 0
        a, b, op = values[i], values[i + 1], pending[i]
        r = _apply(a, op, b)
        lines.append(f"{_fmt(a)} {op} {_fmt(b)} = {r}")
        values[i:i + 2] = [r]
        del pending[i]
    lines.append(f"The answer is \\boxed{{{values[0]}}}.")
    return "\n".join(lines), values[0]


def rewrite_solution(operands: Sequence[int], ops: Sequence[str]) -> tuple[str, int]:
    """The expression rewritten after every operation (multiplication first, then left to right), one `= ...`
    line per step, then the boxed value. Each line is a local edit of the one above it, so no step has to fetch an
    operand from far back in the question. Returns (text, value)."""
    if len(ops) != len(operands) - 1 or not operands:
        raise ValueError(f"need len(ops) == len(operands) - 1, got {len(ops)} ops for {len(operands)} operands.")
    values, pending = list(operands), list(ops)
    lines = [_render(values, pending)]
    while pending:
        i = pending.index("*") if "*" in pending else 0
        a, b, op = values[i], values[i + 1], pending[i]
        values[i:i + 2] = [_apply(a, op, b)]
        del pending[i]
        lines.append("= " + _render(values, pending))
    lines.append(f"The answer is \\boxed{{{values[0]}}}.")
    return "\n".join(lines), values[0]


SOLUTION_STYLES = {"columns": worked_solution, "compact": compact_solution, "rewrite": rewrite_solution}


# ----------------------------------------------------------------------------------------------------------------
# Solutions with one slip: contrast negatives for a verifier
# ----------------------------------------------------------------------------------------------------------------
SLIP_KINDS = ("result", "operand")
_SLIP_DELTAS = (-10, -3, -2, -1, 1, 2, 3, 10)  # carry slips (+-10) and near misses, as tiny policies make them


def slipped_solution(operands: Sequence[int], ops: Sequence[str], rng: np.random.Generator, *,
                     style: str = "compact", kinds: Sequence[str] = SLIP_KINDS) -> tuple[str, int]:
    """A worked solution in `style` with exactly one slip, carried on *consistently* from the wrong value -- the
    way a policy errs (on the CPU default 94% of wrong samples had one wrong sum in a step, 6% a miscopied
    operand) -- so the text is wrong only where the slip is, and the boxed answer is wrong.

    kinds: the slips to draw from -- "result" (a step's result off by one of +-1, +-2, +-3, +-10) and/or
    "operand" (one operand of a step copied off by one of those, the result then computed from the copy).
    Returns (text, wrong value). Needs at least one operation. Styles "compact" and "rewrite" only: the column
    algorithms of "columns" write sub-steps that one wrong value would not change consistently."""
    if style not in ("compact", "rewrite"):
        raise ValueError(f"slipped_solution supports style 'compact' or 'rewrite', got {style!r}")
    if len(ops) != len(operands) - 1 or not ops:
        raise ValueError(f"slipped_solution needs at least one operation and len(ops) == len(operands) - 1, got "
                         f"{len(ops)} ops for {len(operands)} operands.")
    bad = [k for k in kinds if k not in SLIP_KINDS]
    if bad or not kinds:
        raise ValueError(f"slipped_solution kinds must be a non-empty subset of {SLIP_KINDS}, got {tuple(kinds)}")
    _, true_value = compact_solution(operands, ops)
    for _ in range(100):
        # A draw is rejected when the slip vanishes (`* 0` hides a wrong operand, a later `* 0` a wrong result),
        # flips a sign or changes an operand's digit count (those read as other kinds of error).
        at, kind = int(rng.integers(len(ops))), kinds[int(rng.integers(len(kinds)))]
        delta = int(_SLIP_DELTAS[int(rng.integers(len(_SLIP_DELTAS)))])
        values, pending = list(operands), list(ops)
        lines = [_render(values, pending)] if style == "rewrite" else []
        for step in range(len(ops)):
            i = pending.index("*") if "*" in pending else 0
            a, b, op = values[i], values[i + 1], pending[i]
            if step == at and kind == "operand":
                side = i + int(rng.integers(2))  # either operand can be copied off
                x = values[side]
                if (x + delta < 0) != (x < 0) or len(str(abs(x + delta))) != len(str(abs(x))):
                    break
                values[side] = x + delta
                a, b = values[i], values[i + 1]
            r = _apply(a, op, b)
            if step == at and kind == "result":
                if (r + delta < 0) != (r < 0):
                    break
                r += delta
            if style == "compact":
                lines.append(f"{_fmt(a)} {op} {_fmt(b)} = {r}")
            values[i:i + 2] = [r]
            del pending[i]
            if style == "rewrite":
                lines.append("= " + _render(values, pending))
        else:
            if values[0] != true_value:
                lines.append(f"The answer is \\boxed{{{values[0]}}}.")
                return "\n".join(lines), values[0]
    raise ValueError(f"slipped_solution could not place a slip that changes the answer of {_render(operands, ops)} "
                     f"with kinds {tuple(kinds)}")


def slipped_example_solution(example: Example, rng: np.random.Generator, *, style: str = "compact",
                             kinds: Sequence[str] = SLIP_KINDS) -> str:
    """`slipped_solution` for a generated arithmetic `Example` (its `meta["expression"]`): a contrast negative
    for the same question as `example.solution`."""
    expression = example.meta.get("expression") if example.meta else None
    if not expression:
        raise ValueError(f"example {example.id!r} has no meta['expression']; slipped solutions need generated "
                         "arithmetic examples")
    operands, ops = _parse_expression(expression)
    return slipped_solution(operands, ops, rng, style=style, kinds=kinds)[0]


# ----------------------------------------------------------------------------------------------------------------
# The generator
# ----------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ArithmeticConfig:
    """What problems look like.

    min_digits/max_digits: digits of each operand (uniform in the range, then a uniform number with that many).
    min_operands/max_operands: operands per expression.
    operations: drawn uniformly per gap among "+", "-", "*".
    allow_negative: if False, expressions whose intermediate or final value is negative are redrawn.
    question_template: must contain `{expression}`.
    solution_style: "columns" (school algorithms digit by digit), "compact" (one `a op b = r` line per step) or
        "rewrite" (the whole expression rewritten after each step).
    """

    min_digits: int = 1
    max_digits: int = 3
    min_operands: int = 2
    max_operands: int = 2
    operations: tuple[str, ...] = ("+", "-")
    allow_negative: bool = True
    question_template: str = "What is {expression}?"
    solution_style: str = "columns"

    def __post_init__(self):
        if not 1 <= self.min_digits <= self.max_digits:
            raise ValueError(f"need 1 <= min_digits <= max_digits, got {self.min_digits}, {self.max_digits}.")
        if not 1 <= self.min_operands <= self.max_operands:
            raise ValueError(f"need 1 <= min_operands <= max_operands, got {self.min_operands}, "
                             f"{self.max_operands}.")
        bad = [op for op in self.operations if op not in _OPS]
        if bad or not self.operations:
            raise ValueError(f"operations must be a non-empty subset of {_OPS}, got {self.operations}.")
        if self.solution_style not in SOLUTION_STYLES:
            raise ValueError(f"solution_style must be one of {sorted(SOLUTION_STYLES)}, got "
                             f"{self.solution_style!r}.")
        if "{expression}" not in self.question_template:
            raise ValueError("question_template must contain '{expression}'.")


def _intermediates_nonnegative(operands: Sequence[int], ops: Sequence[str]) -> bool:
    values, pending = list(operands), list(ops)
    while pending:
        i = pending.index("*") if "*" in pending else 0
        a, b, op = values[i], values[i + 1], pending[i]
        r = _apply(a, op, b)
        if r < 0:
            return False
        values[i:i + 2] = [r]
        del pending[i]
    return True


def arithmetic_example(index: int, *, seed: int = 0, config: ArithmeticConfig = ArithmeticConfig()) -> Example:
    """Example number `index` of the stream defined by (seed, config)."""
    rng = np.random.default_rng([_RNG_TAG, int(seed), int(index)])
    for _ in range(1000):
        k = int(rng.integers(config.min_operands, config.max_operands + 1))
        operands = []
        for _ in range(k):
            d = int(rng.integers(config.min_digits, config.max_digits + 1))
            low = 0 if d == 1 else 10 ** (d - 1)
            operands.append(int(rng.integers(low, 10**d)))
        ops = [config.operations[int(j)] for j in rng.integers(0, len(config.operations), size=k - 1)]
        if config.allow_negative or _intermediates_nonnegative(operands, ops):
            break
    else:
        raise ValueError(f"could not draw a non-negative expression for {config}; allow negatives or add '+'.")
    expression = _render(operands, ops)
    solution, value = SOLUTION_STYLES[config.solution_style](operands, ops)
    return Example(
        question=config.question_template.format(expression=expression),
        answer=str(value),
        id=f"arith-{seed}-{index}",
        solution=solution,
        meta={"source": "arithmetic", "expression": expression, "seed": int(seed), "index": int(index)},
    )


def arithmetic_examples(n: int, *, seed: int = 0, config: ArithmeticConfig = ArithmeticConfig(),
                        start: int = 0) -> list[Example]:
    """Examples `start .. start + n - 1` of the stream defined by (seed, config)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}.")
    return [arithmetic_example(i, seed=seed, config=config) for i in range(start, start + n)]


# ----------------------------------------------------------------------------------------------------------------
# A process check for compact solutions
# ----------------------------------------------------------------------------------------------------------------
_STEP_LINE = re.compile(r"^\s*(\(?-?\d+\)?)\s*([-+*])\s*(\(?-?\d+\)?)\s*=\s*(-?\d+)\s*$")


def calculator_demo(example: Example) -> list[str]:
    """A tool-using worked solution (`rollout.multiturn.demo_solution`): the expression handed to the calculator,
    its result as the tool's turn, then the boxed answer copied from it."""
    expr = example.meta["expression"]
    return [f"<calculator>{expr}</calculator>", example.answer, f"The answer is \\boxed{{{example.answer}}}."]


def _int(token: str) -> int:
    return int(token.strip("()"))


def compact_steps_faithful(text: str, expression: str) -> bool:
    """True when `text` holds exactly the compact solution's steps for `expression`: the same operations on the
    same operands in the same order, each with the right result. The outcome reward alone let a tiny model learn to
    write wrong steps above a right answer (the answer computed "in its head"); this check makes the written
    steps count."""
    operands, ops = _parse_expression(expression)
    want, _ = compact_solution(operands, ops)
    want_steps = want.splitlines()[:-1]
    got = [ln for ln in text.splitlines() if _STEP_LINE.match(ln)]
    if len(got) != len(want_steps):
        return False
    for line, ref in zip(got, want_steps):
        a, op, b, r = _STEP_LINE.match(line).groups()
        ra, rop, rb, rr = _STEP_LINE.match(ref).groups()
        if (_int(a), op, _int(b), int(r)) != (_int(ra), rop, _int(rb), int(rr)):
            return False
    return True


def _parse_expression(expression: str) -> tuple[list[int], list[str]]:
    tokens = re.findall(r"\(-\d+\)|-?\d+|[-+*]", expression.replace(" ", " "))
    operands, ops = [], []
    expect_operand = True
    for t in tokens:
        if expect_operand:
            operands.append(_int(t))
        else:
            ops.append(t)
        expect_operand = not expect_operand
    return operands, ops


def arithmetic_process_reward(completions: Sequence[str], examples: Sequence[Example]):
    """Outcome reward (math_reward on the boxed answer) AND `compact_steps_faithful` on every step: 1 only when
    the answer is right and the written computation is the one that produces it."""
    from jaxrl_reason.rewards.math import math_reward

    outcome = math_reward(completions, [e.answer for e in examples])
    scores = np.array(outcome.scores, np.float32)
    details = []
    for i, (text, e) in enumerate(zip(completions, examples)):
        faithful = compact_steps_faithful(text, e.meta["expression"])
        scores[i] = scores[i] * float(faithful)
        details.append({**outcome.details[i], "steps_faithful": faithful})
    return type(outcome)(scores, details)
