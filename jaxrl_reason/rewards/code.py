"""Code rewards: extract a program from a completion, run it against its tests in a sandbox, score 0/1.

    result = code_completion_reward(completions, [problem.tests for problem in problems])
    result.scores    # float32 [N]: 1.0 iff the harness reported every test ran and passed
    result.details   # per item: status, per-test results, timeout / output-limit flags, captured output

Tests (`CodeTests`) come in two kinds:
  * assert scripts (HumanEval / MBPP): each case is Python source run after the program, in its namespace;
  * stdin/stdout pairs (CodeForces / LiveCodeBench): the program runs as a script once per case.
Isolation, limits and the verdict protocol live in `sandbox.py`; this module only shapes inputs and outputs.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from jaxrl_reason.rewards.base import RewardResult, summarize_details
from jaxrl_reason.rewards.sandbox import (
    Job,
    Sandbox,
    SandboxConfig,
    SandboxUnavailableError,
    get_sandbox,
)

__all__ = [
    "IOCase",
    "CodeTests",
    "SandboxConfig",
    "SandboxUnavailableError",
    "Sandbox",
    "as_code_tests",
    "humaneval_tests",
    "extract_code",
    "code_reward",
    "code_completion_reward",
    "code_metrics",
]

_COMPARE_MODES = ("lines", "tokens", "exact")
_PYTHON_INFO = {"", "python", "python3", "py", "py3"}


class IOCase(NamedTuple):
    """One stdin/stdout test: feed `stdin`, expect `stdout` (compared per `CodeTests.compare`)."""

    stdin: str
    stdout: str


class CodeTests(NamedTuple):
    """The tests of one problem. Exactly one of `asserts` and `io` is non-empty.

    asserts: Python sources, each one test, run in order after the program in the program's namespace.
             An AssertionError fails the test; any other exception is an error. The program is loaded as
             module `solution`, so its `if __name__ == "__main__":` block does not run.
    io:      stdin/stdout cases; the program runs as `__main__` once per case.
    prelude: source run before the program (HumanEval prompt imports, MBPP test_setup_code).
    compare: stdio comparison: "lines" (trailing spaces and blank lines ignored), "tokens", or "exact".
    """

    asserts: tuple[str, ...] = ()
    io: tuple[IOCase, ...] = ()
    prelude: str = ""
    compare: str = "lines"

    @property
    def n_tests(self) -> int:
        return len(self.asserts) + len(self.io)


def _check_tests(tests: CodeTests, where: str) -> CodeTests:
    if bool(tests.asserts) == bool(tests.io):
        raise ValueError(f"{where}: CodeTests needs exactly one of `asserts` (assert scripts) or `io` "
                         f"(stdin/stdout cases); got {len(tests.asserts)} asserts and {len(tests.io)} io cases")
    if tests.compare not in _COMPARE_MODES:
        raise ValueError(f"{where}: CodeTests.compare must be one of {_COMPARE_MODES}, got {tests.compare!r}")
    if not all(isinstance(source, str) for source in tests.asserts):
        raise ValueError(f"{where}: CodeTests.asserts must be strings of Python source")
    for case in tests.io:
        if not (isinstance(case, IOCase) and isinstance(case.stdin, str) and isinstance(case.stdout, str)):
            raise ValueError(f"{where}: CodeTests.io entries must be IOCase(stdin: str, stdout: str), got {case!r}")
    if not isinstance(tests.prelude, str):
        raise ValueError(f"{where}: CodeTests.prelude must be a string, got {type(tests.prelude).__name__}")
    return tests


def as_code_tests(spec: Any, where: str = "tests") -> CodeTests:
    """Coerce a test spec into `CodeTests`.

    Accepts a `CodeTests`; a string (one assert script); or a mapping in a common dataset shape:
    `{"test": str, "entry_point": str}` (HumanEval: the script defines `check`, called on the entry point),
    `{"test_list": [...], "test_setup_code"| "test_imports": ...}` (MBPP), `{"asserts": [...]}`, or
    `{"inputs": [...], "outputs": [...]}` (stdin/stdout).
    """
    if isinstance(spec, CodeTests):
        return _check_tests(spec, where)
    if isinstance(spec, str):
        return _check_tests(CodeTests(asserts=(spec,)), where)
    if isinstance(spec, Mapping):
        if "test" in spec and "entry_point" in spec:
            return _check_tests(humaneval_tests(spec["test"], spec["entry_point"], spec.get("prompt", "")), where)
        if "test_list" in spec or "asserts" in spec:
            asserts = spec.get("test_list", spec.get("asserts"))
            prelude = spec.get("test_setup_code") or spec.get("test_imports") or ""
            if not isinstance(prelude, str):
                prelude = "\n".join(prelude)
            return _check_tests(CodeTests(asserts=tuple(asserts), prelude=prelude), where)
        if "inputs" in spec and "outputs" in spec:
            inputs, outputs = spec["inputs"], spec["outputs"]
            if len(inputs) != len(outputs):
                raise ValueError(f"{where}: `inputs` has {len(inputs)} cases but `outputs` has {len(outputs)}")
            return _check_tests(CodeTests(io=tuple(IOCase(i, o) for i, o in zip(inputs, outputs)),
                                          compare=spec.get("compare", "lines")), where)
        raise ValueError(f"{where}: unrecognised test mapping with keys {sorted(spec)}; expected `test` + "
                         "`entry_point`, `test_list`, `asserts`, or `inputs` + `outputs`")
    raise TypeError(f"{where}: expected CodeTests, str or a mapping, got {type(spec).__name__}")


def humaneval_tests(test: str, entry_point: str, prompt: str = "") -> CodeTests:
    """HumanEval's `check(candidate)` script as one test, with the problem's prompt as prelude.

    HumanEval's own harness runs `prompt + completion`; the prompt carries imports and, for some problems,
    helpers the tests call (`poly`, `encode_cyclic`). Running it first lets a model answer with a complete
    program that omits them; the program's own definition of the entry point replaces the prompt's stub.
    """
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise ValueError(f"entry_point must be a Python identifier, got {entry_point!r}")
    return CodeTests(asserts=(f"{test}\n\ncheck({entry_point})\n",), prelude=prompt)


# ----------------------------------------------------------------------------------------------------------
# Extraction.

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$")
_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")


def extract_code(text: str, *, after_think: bool = True) -> str | None:
    """The last fenced Python block of a completion, or None.

    Fences follow CommonMark: a line of >= 3 backticks (or tildes) opens a block, a line of the same character
    at least as long closes it. Blocks tagged with another language (```text, ```bash) are skipped; an
    untagged block counts as Python. An unclosed final fence (a truncated answer) or no block at all gives
    None — a wrong answer, never an exception. With `after_think`, only text after the last `</think>` counts
    when there is one, so code drafted while thinking is not graded.
    """
    if not isinstance(text, str):
        return None
    if after_think and "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    last: str | None = None
    fence: str | None = None
    info = ""
    body: list[str] = []
    for line in text.splitlines():
        if fence is None:
            match = _FENCE.match(line)
            if match:
                fence, info, body = match.group(1), match.group(2).lower(), []
            continue
        close = _CLOSE.match(line)
        if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
            if info in _PYTHON_INFO:
                last = "\n".join(body) + "\n"
            fence = None
            continue
        body.append(line)
    if fence is not None:
        return None  # the last block never closed: the answer was cut off
    return last


# ----------------------------------------------------------------------------------------------------------
# Rewards.


def _job(program: str, tests: CodeTests) -> Job:
    if tests.io:
        cases = tuple({"stdin": case.stdin, "stdout": case.stdout} for case in tests.io)
        return Job(program=program, mode="stdio", cases=cases, prelude=tests.prelude, compare=tests.compare)
    return Job(program=program, mode="assert", cases=tuple(tests.asserts), prelude=tests.prelude)


def _no_answer_detail(n_tests: int) -> dict[str, Any]:
    return {"passed": False, "status": "no_answer", "no_answer": True, "n_tests": n_tests, "n_passed": 0,
            "tests": [], "program_error": "", "timeout": False, "cpu_limit": False, "killed_by": None,
            "output_limit_exceeded": False,
            "sandbox_error": False, "exit_code": None, "output": "", "wall_s": 0.0}


def code_reward(
    programs: Sequence[str | None],
    tests: Sequence[Any],
    *,
    config: SandboxConfig | None = None,
    sandbox: Sandbox | None = None,
) -> RewardResult:
    """Run each program against its tests in the sandbox; score 1.0 iff every test ran and passed.

    programs: [N] Python sources; None (no extractable answer) scores 0 without running anything.
    tests:    [N] test specs (see `as_code_tests`).
    Raises only on caller errors (length mismatch, malformed tests, no sandbox and unsafe execution not
    allowed); anything a program does becomes a 0 and a detail.
    """
    if len(programs) != len(tests):
        raise ValueError(f"code_reward: `programs` has {len(programs)} items but `tests` has {len(tests)}")
    specs = [as_code_tests(spec, where=f"tests[{i}]") for i, spec in enumerate(tests)]
    for i, program in enumerate(programs):
        if program is not None and not isinstance(program, str):
            raise TypeError(f"programs[{i}] must be str or None, got {type(program).__name__}")
    sandbox = sandbox or get_sandbox(config)
    to_run = [i for i, program in enumerate(programs) if program is not None]
    ran = sandbox.run_many([_job(programs[i], specs[i]) for i in to_run])
    details: list[dict[str, Any]] = [_no_answer_detail(spec.n_tests) for spec in specs]
    for i, result in zip(to_run, ran):
        details[i] = {**result, "no_answer": False}
    scores = np.asarray([1.0 if d["passed"] else 0.0 for d in details], dtype=np.float32)
    return RewardResult(scores=scores, details=details)


def code_completion_reward(
    completions: Sequence[str],
    tests: Sequence[Any],
    *,
    config: SandboxConfig | None = None,
    sandbox: Sandbox | None = None,
    after_think: bool = True,
) -> RewardResult:
    """`code_reward` on the last fenced Python block of each completion; no block (or an unclosed one) is 0."""
    programs = [extract_code(text, after_think=after_think) for text in completions]
    return code_reward(programs, tests, config=config, sandbox=sandbox)


def code_metrics(details: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Fractions for logging: timeouts, missing answers, output-limit kills, sandbox failures, crashes."""
    metrics = summarize_details(details, ("timeout", "no_answer", "output_limit_exceeded", "sandbox_error"))
    n = max(len(details), 1)
    for status in ("program_error", "crashed"):
        metrics[status] = sum(d.get("status") == status for d in details) / n
    metrics["test_pass_rate"] = float(np.mean([d["n_passed"] / d["n_tests"] if d.get("n_tests") else 0.0
                                               for d in details])) if details else 0.0
    return metrics
