"""The third testbed task (docs/tasks/testbed.md): complete a 4x4 Latin square (every row and every column holds
A B C D once) from a grid with blanks. Checking compares cells at fixed offsets (row mates, column mates, the
givens of the question); filling a blank needs the constraints of its row and column together, and with several
blanks in a line a search.

Every puzzle has exactly one completion (checked against all 576 squares). Each instance also yields, from the
same grid, wrong solutions of a named error kind, CURE critiques of them (the four fields of
docs/methods/cure.md#spec-critique) and corrections (wrong attempt -> right solution) for CIPO.

Text formats (symbols and the blank mark `x` are letters written after a space, so under the task-trained BPE
each is one token and a grid is 19 tokens at fixed offsets -- the positional copying a tiny model learns first):
    question  "Fill each x so that every row and every column holds A B C D once.\\nGrid: A x C D, C D x B, ..."
    solution  "\\\\boxed{ A B C D, C D A B, B A D C, D C B A}"          (the four rows, in order)
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from typing import Optional, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.data import testbed
from jaxrl_reason.rewards.math import extract_boxed

N = 4
SYMBOLS = "ABCD"
BLANK = "x"
# The constraint a wrong answer violates first, in the order `error_kind` checks them.
ERROR_KINDS = ("no_answer", "bad_grid", "given_changed", "row_repeat", "col_repeat")
INJECTABLE_KINDS = ("given_changed", "row_repeat", "col_repeat")
INSTRUCTION = "Fill each x so that every row and every column holds A B C D once."
_QUESTION_RE = re.compile(r"^" + re.escape(INSTRUCTION) + r"\nGrid: (?P<grid>.*)$")


SOLUTION_FORMATS = ("grid", "deduction")


@dataclasses.dataclass(frozen=True)
class LatinConfig:
    # blank cells of the 16, the difficulty knob: after 1,500 SFT steps the 4 x 128 policy samples 80% right at 6
    # blanks and 39% at 10 (docs/results/testbed.md)
    blanks: int = 10
    # the worked solution: grid (the boxed grid alone) | deduction (a line per blank, then the boxed grid;
    # `deduction_text`)
    solution: str = "grid"

    def __post_init__(self):
        if not 1 <= self.blanks <= 10:
            raise ValueError(f"latin_square blanks={self.blanks} must be in [1, 10] (more has no unique completion)")
        if self.solution not in SOLUTION_FORMATS:
            raise ValueError(f"latin_square solution={self.solution!r} is unknown; use {' | '.join(SOLUTION_FORMATS)}")


DEFAULT_CONFIG = LatinConfig()  # the registered source builds its own from `data.latin_blanks`


@functools.lru_cache(maxsize=1)
def all_squares() -> tuple:
    """All 576 4x4 Latin squares over SYMBOLS, each a tuple of 16 symbols (row-major)."""
    rows = list(itertools.permutations(SYMBOLS))
    out = []
    for r in itertools.product(rows, repeat=N):
        if all(len({r[i][j] for i in range(N)}) == N for j in range(N)):
            out.append(tuple(c for row in r for c in row))
    return tuple(out)


def grid_text(cells: Sequence[str]) -> str:
    return ", ".join(" ".join(cells[i * N:(i + 1) * N]) for i in range(N))


def _parse_grid(text: str, allowed: str) -> Optional[list[str]]:
    rows = [r.split() for r in text.split(",")]
    if len(rows) != N or any(len(r) != N for r in rows) or any(c not in allowed or len(c) != 1
                                                                 for r in rows for c in r):
        return None
    return [c for r in rows for c in r]


def make_instance(rng: np.random.Generator, config: LatinConfig) -> dict:
    """{"square": 16 symbols, "puzzle": 16 cells with BLANK}: a uniform square, blanks with a unique completion."""
    squares = all_squares()
    for _ in range(1000):
        sq = squares[int(rng.integers(len(squares)))]
        holes = set(int(i) for i in rng.choice(N * N, size=config.blanks, replace=False))
        puzzle = [BLANK if i in holes else c for i, c in enumerate(sq)]
        fits = sum(all(p == BLANK or p == s for p, s in zip(puzzle, other)) for other in squares)
        if fits == 1:
            return {"square": list(sq), "puzzle": puzzle}
    raise ValueError(f"latin_square: no puzzle with a unique completion at {config}; lower blanks")


def question_text(inst: dict) -> str:
    return f"{INSTRUCTION}\nGrid: {grid_text(inst['puzzle'])}"


def parse_question(question: str) -> list[str]:
    m = _QUESTION_RE.match(question.strip())
    cells = _parse_grid(m.group("grid"), SYMBOLS + BLANK) if m else None
    if cells is None:
        raise ValueError(f"not a latin_square question: {question[:60]!r}")
    return cells


def solution_text(cells: Sequence[str]) -> str:
    return "\\boxed{ " + grid_text(cells) + "}"


def deduction_text(puzzle: Sequence[str], square: Sequence[str]) -> str:
    """The worked deduction of `square` from `puzzle`: one line per blank, in the order naked singles settle them
    (each step fills the first blank, row-major, whose row and column together leave one symbol), each line
    copying that row and that column as they stand after the earlier lines (`x` still blank), then the symbol:

        Cell 2 3: C D x B | x D x A -> A

    Each step's decision is over the eight cells its own line just wrote, and an error is one line of a chain --
    the shape of the CPU default's sums, which RL moves -- instead of a cell of a 22-token grid decided at once
    (what a 4 x 128 warm-up makes of it: docs/results/rl_headroom.md, table 6). Every puzzle `make_instance`
    draws at <= 10 blanks is settled by singles alone; another raises."""
    cells = list(puzzle)
    lines = []
    while BLANK in cells:
        for i, c in enumerate(cells):
            if c != BLANK:
                continue
            r, k = divmod(i, N)
            row, col = cells[r * N:(r + 1) * N], cells[k::N]
            left = set(SYMBOLS) - set(row) - set(col)
            if len(left) == 1:
                break
        else:
            raise ValueError(f"latin_square: {grid_text(cells)} has no blank its row and column settle alone")
        symbol = left.pop()
        if symbol != square[i]:
            raise ValueError(f"latin_square: the deduction gives {symbol} at cell {i} where the square has "
                             f"{square[i]}: not the puzzle's completion")
        lines.append(f"Cell {r + 1} {k + 1}: {' '.join(row)} | {' '.join(col)} -> {symbol}")
        cells[i] = symbol
    return "\n".join(lines)


def worked_solution(inst: dict, config: LatinConfig) -> str:
    """The SFT target under `config.solution`: the boxed grid, after the deduction lines for "deduction"."""
    grid = solution_text(inst["square"])
    return grid if config.solution == "grid" else f"{deduction_text(inst['puzzle'], inst['square'])}\n{grid}"


def parse_answer(text: str) -> Optional[list[str]]:
    """The boxed grid of a model output (16 cells, any letters), or None when there is no box."""
    boxed = extract_boxed(text) if isinstance(text, str) else None
    if boxed is None:
        return None
    return _parse_grid(boxed, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") or []


def _lines(cells):
    rows = [[cells[i * N + j] for j in range(N)] for i in range(N)]
    cols = [[cells[i * N + j] for i in range(N)] for j in range(N)]
    return rows, cols


def error_kind(question: str, cells: Optional[Sequence[str]]) -> Optional[str]:
    """The first constraint `cells` violates (ERROR_KINDS), or None when it is the completion: a 4x4 grid of
    A-D, every given kept, no symbol twice in a row, no symbol twice in a column."""
    puzzle = parse_question(question)
    if cells is None:
        return "no_answer"
    if len(cells) != N * N or any(c not in SYMBOLS for c in cells):
        return "bad_grid"
    if any(p != BLANK and p != c for p, c in zip(puzzle, cells)):
        return "given_changed"
    rows, cols = _lines(cells)
    if any(len(set(r)) != N for r in rows):
        return "row_repeat"
    if any(len(set(c)) != N for c in cols):
        return "col_repeat"
    return None


def latin_square_examples(n: int, *, seed: int, config: Optional[LatinConfig] = None) -> list[Example]:
    config = config or DEFAULT_CONFIG
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        inst = make_instance(rng, config)
        out.append(Example(question=question_text(inst), answer=grid_text(inst["square"]),
                           id=f"latin_square-{seed}-{i}", solution=worked_solution(inst, config),
                           meta={"source": "latin_square", **inst}))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Wrong solutions of a named kind, and what they teach: verify rows, critiques, corrections
# ----------------------------------------------------------------------------------------------------------------
def inject_error(e: Example, kind: str, rng: np.random.Generator) -> list[str]:
    """A wrong grid for `e` whose first violated constraint is `kind` (INJECTABLE_KINDS):
    given_changed: a given cell rewritten; row_repeat: a blank filled with a symbol its row already has;
    col_repeat: two blanks of one row swapped (the row still holds A-D once, both columns now repeat; needs a row
    with two blanks, `can_inject`)."""
    sq, puzzle = list(e.meta["square"]), e.meta["puzzle"]
    blanks = [i for i, p in enumerate(puzzle) if p == BLANK]
    if kind == "given_changed":
        i = [j for j, p in enumerate(puzzle) if p != BLANK][int(rng.integers(N * N - len(blanks)))]
        sq[i] = [s for s in SYMBOLS if s != sq[i]][int(rng.integers(N - 1))]
        return sq
    if kind == "row_repeat":
        i = blanks[int(rng.integers(len(blanks)))]
        r = i // N
        sq[i] = sq[r * N + [j for j in range(N) if r * N + j != i][int(rng.integers(N - 1))]]
        return sq
    if kind == "col_repeat":
        pairs = [(a, b) for a, b in itertools.combinations(blanks, 2) if a // N == b // N]
        if pairs:  # swap two blanks of one row: the row keeps A-D once, both columns now repeat
            a, b = pairs[int(rng.integers(len(pairs)))]
            sq[a], sq[b] = sq[b], sq[a]
            return sq
        raise ValueError("col_repeat needs a row with two blanks (can_inject)")
    raise ValueError(f"error kind {kind!r} is unknown; use {' | '.join(INJECTABLE_KINDS)}")


# The shape of the policy's own wrong grids, measured on 154 wrong greedy answers of a warmed-up 4 x 128 policy
# (`experiments/research/own_vs_injected.py`, docs/results/cipo_testbed.md): rows mostly stay permutations of A-D
# written in the wrong order (the columns then repeat), 5 of the 10 blanks wrong at the median, a given rewritten
# in 40%, a row repeat in 45%.
SPREAD_ROWS = {1: 0.25, 2: 0.40, 3: 0.25, 4: 0.10}  # rows whose blank cells are re-ordered
SPREAD_GIVENS = {0: 0.60, 1: 0.33, 2: 0.07}  # givens swapped with another cell of their row
SPREAD_ROW_REPEAT = 0.45  # the chance that one blank is re-filled with a symbol its row already holds


def _draw(rng: np.random.Generator, weights: dict) -> int:
    keys = list(weights)
    return keys[int(rng.choice(len(keys), p=np.asarray([weights[k] for k in keys]) / sum(weights.values())))]


def inject_spread(e: Example, rng: np.random.Generator) -> list[str]:
    """A wrong grid shaped like the policy's own (the SPREAD_* weights): the blanks of a few rows written in
    another order, sometimes a given swapped with another cell of its row, sometimes a row repeat. Never right:
    the completion is unique, and the grid always differs from it."""
    sq, puzzle = list(e.meta["square"]), e.meta["puzzle"]
    gold = list(sq)
    row_blanks = [[i for i in range(r * N, (r + 1) * N) if puzzle[i] == BLANK] for r in range(N)]
    rows = [r for r in range(N) if len(row_blanks[r]) >= 2]
    for r in rng.permutation(rows)[:_draw(rng, SPREAD_ROWS)]:
        cells = row_blanks[r]
        order = rng.permutation(len(cells))
        while (order == np.arange(len(cells))).all():
            order = rng.permutation(len(cells))
        vals = [sq[i] for i in cells]
        for i, j in zip(cells, order):
            sq[i] = vals[j]
    givens = [i for i, p in enumerate(puzzle) if p != BLANK]
    for i in rng.permutation(givens)[:_draw(rng, SPREAD_GIVENS)]:
        r = i // N
        others = row_blanks[i // N] or [j for j in range(r * N, (r + 1) * N) if j != i]
        j = others[int(rng.integers(len(others)))]
        sq[i], sq[j] = sq[j], sq[i]
    if rng.random() < SPREAD_ROW_REPEAT or sq == gold:
        blanks = [i for r in range(N) for i in row_blanks[r]]
        i = blanks[int(rng.integers(len(blanks)))]
        r = i // N
        sq[i] = sq[r * N + [j for j in range(N) if r * N + j != i][int(rng.integers(N - 1))]]
    return sq


def can_inject(e: Example, kind: str) -> bool:
    blanks = [i for i, p in enumerate(e.meta["puzzle"]) if p == BLANK]
    if kind == "col_repeat":
        return any(a // N == b // N for a, b in itertools.combinations(blanks, 2))
    return True


def first_fault(question: str, cells: Sequence[str], kind: str) -> int:
    """The row index holding the earliest error of `kind` (for col_repeat: the row of the later repeated cell)."""
    puzzle = parse_question(question)
    if kind == "given_changed":
        return next(i for i, (p, c) in enumerate(zip(puzzle, cells)) if p != BLANK and p != c) // N
    rows, cols = _lines(cells)
    if kind == "row_repeat":
        return next(r for r, row in enumerate(rows) if len(set(row)) != N)
    j = next(j for j, col in enumerate(cols) if len(set(col)) != N)
    col = cols[j]
    return next(r for r in range(N) if col[r] in col[:r])


_WHY = {
    "given_changed": "This row rewrites a cell the grid already gives, so the answer is not a completion of it.",
    "row_repeat": "This row holds one symbol twice, so it cannot hold all four symbols once.",
    "col_repeat": "This row puts a symbol into a column that already holds it, so that column repeats a symbol.",
}
_HINT = {
    "given_changed": "Copy every given cell unchanged first, and only then decide what goes into the blank cells.",
    "row_repeat": "For each blank, list the symbols its row already holds and pick one that is still missing.",
    "col_repeat": "For each blank, rule out the symbols already in its row and also those already in its column.",
}
GENERIC_HINT = "Fill first the blanks whose row or column has a single gap, then use those to settle the rest."


def critique_text(question: str, cells: Sequence[str], kind: Optional[str]) -> str:
    """The four-field critique (docs/methods/cure.md#spec-critique): the quote is the faulty row as the answer writes
    it; the hint names the violated constraint as a strategy, never a symbol of the answer."""
    if kind is None:
        return ("ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: none\n"
                f"HIGH_LEVEL_HINT: {GENERIC_HINT}")
    r = first_fault(question, cells, kind)
    quote = " ".join(cells[r * N:(r + 1) * N])
    return (f"ERROR_FOUND: true\nERROR_QUOTE: {quote}\nWHY_IT_MATTERS: {_WHY[kind]}\n"
            f"HIGH_LEVEL_HINT: {_HINT[kind]}")


# ----------------------------------------------------------------------------------------------------------------
# The worked check (verify_format="worked_check" / "mark_check"): the verifier writes the check before its verdict
# ----------------------------------------------------------------------------------------------------------------
NO_GRID_CHECK = "Grid: unreadable"


def line_mark(cells: Sequence[str], given: Optional[Sequence[str]] = None) -> str:
    """A check line's mark: `changed` when a given (not blank) differs from its cell, else `repeat` when a symbol
    is doubled, else `ok`. Columns have no givens."""
    if given is not None and len(given) == len(cells) and any(g != BLANK and g != c for g, c in zip(given, cells)):
        return "changed"
    return "repeat" if len(set(cells)) != len(cells) else "ok"


def check_text(question: str, cells: Optional[Sequence[str]], copies: bool = True) -> str:
    """The check a verifier writes before its verdict, one constraint group per line, each a copy of what it
    compares and the outcome: a row line puts the question's row beside the answer's row (`changed` when a given
    differs, else `repeat` when a symbol is doubled, else `ok`), a column line copies the answer's column. Every
    decision is then over a few adjacent tokens the line itself just wrote -- the positional copying a tiny model
    learns first -- instead of over all 16 cells at the verdict token. The verdict is the conjunction of the lines.

        Row 1: A x C x | A B C D ok
        ...
        Col 4: D B C A ok

    copies=False (verify_format="mark_check"): each line is its mark alone (`Row 1: ok`), decided over the cells
    where they stand in the prompt. A copy can go wrong in its own way: a small model trained beside a solver
    rewrites an anomalous row as a valid one, then marks its copy `ok` (docs/results/testbed.md, run 15)."""
    if cells is None or len(cells) != N * N or any(c not in SYMBOLS for c in cells):
        return NO_GRID_CHECK
    puzzle = parse_question(question)
    rows, cols = _lines(cells)
    lines = []
    for r, row in enumerate(rows):
        given = puzzle[r * N:(r + 1) * N]
        shown = f" {' '.join(given)} | {' '.join(row)}" if copies else ""
        lines.append(f"Row {r + 1}:{shown} {line_mark(row, given)}")
    for j, col in enumerate(cols):
        shown = f" {' '.join(col)}" if copies else ""
        lines.append(f"Col {j + 1}:{shown} {line_mark(col)}")
    return "\n".join(lines)


# The mix `_wrong` draws injected kinds from: the warmed-up policy's own wrong samples at 10 blanks
# (docs/results/testbed.md: col_repeat 329, given_changed 182, row_repeat 91 of its 627 wrong samples; the other
# 25 were unparsable grids, a format failure, not injected).
INJECT_WEIGHTS = {"col_repeat": 0.55, "given_changed": 0.30, "row_repeat": 0.15}


TASK = testbed.TestbedTask(
    source="latin_square", gold=lambda e: list(e.meta["square"]), solution_text=solution_text, parse=parse_answer,
    error_kind=error_kind, answer_text=grid_text, inject_error=inject_error, inject_weights=INJECT_WEIGHTS,
    critique_text=critique_text, can_inject=can_inject, check_text=check_text, inject_spread=inject_spread)

# The shared pieces (data/testbed.py) under this task's names.
text_error_kind, check, verify_target, _wrong, auxiliary_rows, latin_square_reward = testbed.bound(TASK)
