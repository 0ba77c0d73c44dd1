"""Code datasets: loaders for the common JSONL shapes, HumanEval, procedural tasks, correction data."""
from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import numpy as np
import pytest

from jaxrl_reason.data.code_datasets import (
    FAMILIES,
    CodeProblem,
    generate_function_tasks,
    load_code_jsonl,
    load_correction_jsonl,
    load_humaneval,
    make_correction_problems,
    mutate_program,
    mutation_sites,
    problem_from_record,
)
from jaxrl_reason.rewards.code import CodeTests, IOCase, Sandbox, SandboxConfig, code_reward

DATA = Path(__file__).parent / "data" / "code"


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(SandboxConfig(workers=2, timeout_s=6.0, test_timeout_s=3.0))
    yield box
    box.close()


def _scores(programs, problems, sandbox):
    return code_reward(programs, [p.tests for p in problems], sandbox=sandbox).scores.tolist()


# ------------------------------------------------------------------------------------------------ loaders


def test_humaneval_style_jsonl(sandbox):
    evens, triangle = load_code_jsonl(DATA / "humaneval_style.jsonl")
    assert evens.task_id == "Toy/0" and evens.entry_point == "evens" and evens.source == "humaneval"
    assert evens.reference.startswith(evens.starter_code) and evens.question == evens.starter_code
    assert triangle.reference is None  # empty canonical solution
    # The answers omit `List` and `double`; the prompt, run as prelude, provides them as in HumanEval.
    answers = ["def evens(xs: List[int]) -> List[int]:\n    return [x for x in xs if not x % 2]\n",
               "def triangle(n):\n    return n * (n + 1) // 2\n",
               "def triangle(n):\n    return n * n\n"]
    assert _scores([evens.reference] + answers, [evens, evens, triangle, triangle], sandbox) == [1, 1, 1, 0]


def test_mbpp_style_jsonl(sandbox):
    capital, product = load_code_jsonl(DATA / "mbpp_style.jsonl")
    assert capital.entry_point == "capital_words" and len(capital.tests.asserts) == 3
    assert "assert capital_words('Hello there World') == 2" in capital.question
    assert product.tests.prelude == "import math"  # test_imports become the prelude
    wrong = "def capital_words(s):\n    return len(s.split())\n"
    assert _scores([capital.reference, product.reference, wrong], [capital, product, capital], sandbox) == [1, 1, 0]


def test_livecodebench_style_jsonl(sandbox):
    stdin, functional = load_code_jsonl(DATA / "livecodebench_style.jsonl")
    assert stdin.tests.io == (IOCase("3\n4 9 1\n", "8\n"), IOCase("1\n5\n", "0\n"))  # public + private
    assert functional.entry_point == "countBits" and len(functional.tests.asserts) == 3
    spread = "input()\nxs = list(map(int, input().split()))\nprint(max(xs) - min(xs))\n"
    bits = "class Solution:\n    def countBits(self, n: int) -> int:\n        return bin(n).count('1')\n"
    off = "class Solution:\n    def countBits(self, n):\n        return n.bit_length()\n"
    assert _scores([spread, bits, off], [stdin, functional, functional], sandbox) == [1, 1, 0]


def test_livecodebench_pickled_private_tests_need_opt_in():
    cases = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    record = {"question_content": "echo", "public_test_cases": "[]",
              "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()}
    with pytest.raises(ValueError, match="trust_pickled_tests"):
        problem_from_record(record)
    assert problem_from_record(record, trust_pickled_tests=True).tests.io == (IOCase("1\n", "1\n"),)


def test_codecontests_style_jsonl(sandbox):
    (problem,) = load_code_jsonl(DATA / "codecontests_style.jsonl")
    assert len(problem.tests.io) == 2  # generated tests are opt-in
    (with_generated,) = load_code_jsonl(DATA / "codecontests_style.jsonl", include_generated=True)
    assert len(with_generated.tests.io) == 3
    solve = "import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)\n"
    assert _scores([solve, "print(0)\n"], [with_generated, with_generated], sandbox) == [1, 0]


def test_apps_style_jsonl(sandbox):
    reverse, min_max = load_code_jsonl(DATA / "apps_style.jsonl")
    assert reverse.tests.io[1] == IOCase("hello\n", "olleh\n")  # list-of-lines cases are joined
    assert min_max.entry_point == "min_max" and reverse.entry_point is None
    # APPS wraps call-based outputs in a list and returns tuples where it stores lists; both must pass.
    assert _scores([reverse.reference, min_max.reference, "def min_max(xs):\n    return [min(xs), min(xs)]\n"],
                   [reverse, min_max, min_max], sandbox) == [1, 1, 0]


def test_stdio_style_jsonl(sandbox):
    summed, words = load_code_jsonl(DATA / "stdio_style.jsonl")
    assert words.tests.compare == "tokens" and summed.tests.compare == "lines"
    assert _scores([summed.reference, words.reference, "print(1)\n"], [summed, words, summed], sandbox) == [1, 1, 0]


def test_loader_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "x", "entry_point": "f"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: cannot tell the format"):
        load_code_jsonl(bad)
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing field\(s\) \['test'\]"):
        load_code_jsonl(bad, format="humaneval")
    bad.write_text('{"prompt": \n')
    with pytest.raises(ValueError, match="bad.jsonl:1: not valid JSON"):
        load_code_jsonl(bad)
    bad.write_text(json.dumps({"question": "q", "inputs": ["1"], "outputs": []}) + "\n")
    with pytest.raises(ValueError, match="`inputs` has 1 cases but `outputs` has 0"):
        load_code_jsonl(bad)
    with pytest.raises(ValueError, match="format must be"):
        problem_from_record({"question": "q", "inputs": [], "outputs": []}, format="xml")


def test_load_humaneval_from_package():
    problems = load_humaneval()
    assert len(problems) == 164 and len({p.task_id for p in problems}) == 164
    first = problems[0]
    assert first.task_id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.tests.prelude == first.starter_code and first.tests.asserts[0].endswith("check(has_close_elements)\n")


# ------------------------------------------------------------------------------------------------ procedural


def test_generated_tasks_are_deterministic_and_varied():
    a = generate_function_tasks(2 * len(FAMILIES), seed=3)
    assert a == generate_function_tasks(2 * len(FAMILIES), seed=3)
    b = generate_function_tasks(2 * len(FAMILIES), seed=4)
    assert [p.question for p in a] != [p.question for p in b]
    assert {p.task_id.split("/")[1] for p in a} == {f.name for f in FAMILIES}
    # Two draws of one family differ in their constants, not just in the task id.
    assert a[0].reference != a[len(FAMILIES)].reference or a[0].tests != a[len(FAMILIES)].tests
    for problem in a:
        assert f"`{problem.entry_point}(" in problem.question and problem.source == "procedural"
        assert len(problem.tests.asserts) >= 5
    with pytest.raises(ValueError, match="unknown families"):
        generate_function_tasks(1, families=["no_such_family"])


def test_generated_task_values_by_hand():
    (fib,) = generate_function_tasks(1, seed=0, families=["fib_mod"])
    modulus = int(fib.reference.split("% ")[1].split("\n")[0])
    expected = {0: 0, 1: 1, 2: 1, 10: 55 % modulus}
    namespace = {}
    exec(fib.reference, namespace)
    assert all(namespace["fib_mod"](n) == v for n, v in expected.items())
    (rle,) = generate_function_tasks(1, seed=0, families=["run_length"])
    assert "assert run_length('') == ''" in rle.tests.asserts and "assert run_length('a') == 'a1'" in rle.tests.asserts


def test_generated_references_pass_and_stubs_fail(sandbox):
    problems = generate_function_tasks(len(FAMILIES), seed=11)
    stubs = [f"{p.starter_code}    return None\n" for p in problems]
    scores = _scores([p.reference for p in problems] + stubs, problems * 2, sandbox)
    assert scores == [1.0] * len(problems) + [0.0] * len(problems)


# ------------------------------------------------------------------------------------------------ correction


def test_mutations_edit_one_site_and_keep_the_rest():
    source = 'def f(a: int, b: int = 2) -> bool:\n    """Docstring 1 < 2."""\n    return a < b and not a == 0  # keep\n'
    sites = mutation_sites(source)
    # The default `b=2` is a site too; the annotations and the docstring's "1 < 2" are not.
    assert sorted(s.kind for s in sites) == ["boolop", "compare", "compare", "const", "const", "not"]
    by_kind = {}
    for site in sites:
        if site.kind != "const" or site.node.value == 0:
            by_kind.setdefault(site.kind, mutate_program(source, site))
    assert by_kind["const"] == source.replace("0  # keep", "1  # keep")
    assert by_kind["not"] == source.replace("not a == 0", "a == 0")
    assert by_kind["boolop"] == source.replace("a < b and not a == 0", "(a < b or not a == 0)")
    assert "(a <= b)" in by_kind["compare"] or "(a != 0)" in by_kind["compare"]
    for mutant in by_kind.values():
        assert mutant.endswith("# keep\n") and '"""Docstring 1 < 2."""' in mutant


def test_mutation_splice_handles_unicode():
    source = "def g(s):\n    return 'é' * 2 + s\n"
    (const,) = [s for s in mutation_sites(source) if s.kind == "const"]
    assert mutate_program(source, const) == "def g(s):\n    return 'é' * 3 + s\n"


def test_make_correction_problems_are_verified_buggy():
    # Some mutants loop forever (a loop bound pushed the wrong way): short limits keep this test quick.
    with Sandbox(SandboxConfig(workers=2, timeout_s=2.0, test_timeout_s=1.0, cpu_time_s=1)) as sandbox:
        problems = generate_function_tasks(4, seed=5)
        problems.append(problems[0]._replace(task_id="no-reference", reference=None))
        fixes = make_correction_problems(problems, seed=1, candidates_per_problem=3, sandbox=sandbox)
        assert 3 <= len(fixes) <= 4 and "no-reference" not in {f.task_id for f in fixes}
        assert make_correction_problems(problems, seed=1, candidates_per_problem=3, sandbox=sandbox) == fixes
        for fix in fixes:
            assert fix.buggy_program != fix.reference and fix.bug and fix.source == "procedural+mutation"
        scores = code_reward([f.buggy_program for f in fixes] + [f.reference for f in fixes],
                             [f.tests for f in fixes] * 2, sandbox=sandbox).scores
    np.testing.assert_array_equal(scores, np.array([0.0] * len(fixes) + [1.0] * len(fixes), np.float32))


def test_load_correction_jsonl(sandbox, tmp_path):
    largest, square = load_correction_jsonl(DATA / "correction.jsonl")
    assert largest.bug == "logic error" and square.tests.io[0] == IOCase("3\n", "9\n")
    assert largest.question.startswith("Return the largest")
    scores = code_reward([largest.buggy_program, square.buggy_program, largest.reference, square.reference],
                         [largest.tests, square.tests] * 2, sandbox=sandbox).scores
    np.testing.assert_array_equal(scores, np.array([0, 0, 1, 1], np.float32))
    bad = tmp_path / "c.jsonl"
    bad.write_text(json.dumps({"question": "q", "solution": "x", "test_list": ["assert True"]}) + "\n")
    with pytest.raises(ValueError, match="missing `buggy_code`"):
        load_correction_jsonl(bad)
    bad.write_text(json.dumps({"question": "q", "buggy_code": "x = 1"}) + "\n")
    with pytest.raises(ValueError, match="no runnable tests"):
        load_correction_jsonl(bad)


def test_code_problem_is_a_plain_record():
    problem = CodeProblem(task_id="t", question="q", tests=CodeTests(asserts=("assert True",)))
    assert problem.entry_point is None and problem.reference is None and problem._replace(source="s").source == "s"
