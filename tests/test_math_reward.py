"""Math verifier: boxed extraction, math-verify equivalence, and the time-bounded worker pool."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from jaxrl_reason.rewards.base import RewardResult
from jaxrl_reason.rewards.math import (MATH_FLAGS, BoxedAnswer, MathGrader, answers_equivalent, canonical_form,
                                       default_grader, equivalence_classes, extract_boxed, find_boxed, math_reward,
                                       last_number, normalize_gold, reward_metrics)

TIMEOUT_S = 1.5
GRACE_S = 2.0  # generous, so that a loaded CI machine never turns a soft timeout into a kill


@pytest.fixture(scope="module")
def grader():
    g = MathGrader(num_workers=2, timeout_s=TIMEOUT_S, kill_grace_s=GRACE_S)
    g.start()  # so that timing assertions below never include worker start-up
    yield g
    g.close()


# Run inside the worker processes (imported there by module name).
def _stuck_in_c(seconds: float) -> str:
    # Blocking SIGALRM models a computation inside C code (GMP, a C extension) that no Python signal can stop.
    # It leaves SIGALRM blocked on purpose: the worker must restore its timer before the next task.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(seconds)
    return "finished"


def _die(code: int) -> None:
    os._exit(code)


def _raise(msg: str) -> None:
    raise ValueError(msg)


# ---------------------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("so the answer is \\boxed{42}.", BoxedAnswer("42", False)),
    ("first \\boxed{1} then \\boxed{2}", BoxedAnswer("2", False)),                  # last box counts
    ("\\boxed{\\frac{1}{2}}", BoxedAnswer("\\frac{1}{2}", False)),                  # nested braces
    ("\\boxed{\\{1, 2\\}}", BoxedAnswer("\\{1, 2\\}", False)),                      # escaped braces
    ("\\boxed{\\text{a\\}b}}", BoxedAnswer("\\text{a\\}b}", False)),
    ("\\fbox{7}", BoxedAnswer("7", False)),
    ("$\\boxed 12$ done", BoxedAnswer("12", False)),                                # brace-less form
    ("\\boxed {x+1}", BoxedAnswer("x+1", False)),
    ("\\boxed{3} and then \\boxed{4", BoxedAnswer(None, True)),                    # last box unclosed
    ("\\boxed{\\frac{1}{2}", BoxedAnswer(None, True)),
    ("ends with \\boxed", BoxedAnswer(None, True)),
    ("no box here: 42", BoxedAnswer(None, False)),
    ("\\boxedx{3}", BoxedAnswer(None, False)),                                     # a different macro
    ("\\boxed{}", BoxedAnswer("", False)),
])
def test_find_boxed(text, expected):
    assert find_boxed(text) == expected
    assert extract_boxed(text) == expected.content


def test_find_boxed_never_raises_on_odd_input():
    assert find_boxed(None) == BoxedAnswer(None, False)  # type: ignore[arg-type]
    assert find_boxed("\\boxed{" + "{" * 10_000) == BoxedAnswer(None, True)
    long_text = "x " * 200_000 + "\\boxed{9}"
    start = time.perf_counter()
    assert extract_boxed(long_text) == "9"
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize("raw, bare", [
    ("42", "42"), ("$42$", "42"), ("$$ 42 $$", "42"), ("\\(x+1\\)", "x+1"), ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("$\\boxed{7}$", "7"), ("so \\boxed{3}, finally \\boxed{5}", "5"), ("\\$5", "\\$5"),
])
def test_normalize_gold(raw, bare):
    assert normalize_gold(raw) == bare


def test_canonical_form_is_conservative():
    assert canonical_form("\\dfrac{3}{4}") == canonical_form("\\frac {3}{4}") == "\\frac{3}{4}"
    assert canonical_form("\\left( 1, 2 \\right]") == canonical_form("(1,2]")
    assert canonical_form("$x \\, + 1$.") == "x+1"
    # whitespace between letters/digits can carry meaning and is kept
    assert canonical_form("\\pi r") != canonical_form("\\pir")
    assert canonical_form("2 3") != canonical_form("23")
    # a matrix row break `\\` followed by a space is not a thin space `\ `
    assert canonical_form("1 & 2\\\\ 3 & 4") == "1&2\\\\3&4"


# ---------------------------------------------------------------------------------------------------------------
# math_reward
# ---------------------------------------------------------------------------------------------------------------
TRICKY = [  # (gold, completion, expected score)
    ("\\frac{1}{2}", "so x = \\boxed{0.5}", 1.0),
    ("0.5", "\\boxed{\\frac12}", 1.0),
    ("3/4", "\\boxed{\\dfrac{3}{4}}", 1.0),
    ("$(1, 2]$", "\\boxed{(1,2]}", 1.0),
    ("(1, 2]", "\\boxed{(1, 2)}", 0.0),
    ("\\text{(A)}", "\\boxed{A}", 1.0),
    ("A", "\\boxed{\\text{(B)}}", 0.0),
    ("1000", "\\boxed{1,000}", 1.0),
    ("\\{1,2\\}", "\\boxed{\\{2, 1\\}}", 1.0),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\boxed{\\begin{pmatrix}1 & 2\\\\ 3 & 4\\end{pmatrix}}", 1.0),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\boxed{\\begin{pmatrix}1&2\\\\4&3\\end{pmatrix}}", 0.0),
    ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\sqrt{2}/2}", 1.0),
    ("\\boxed{7}", "\\boxed{3}, no wait, \\boxed{7}", 1.0),    # multiple boxes: the last counts
    ("7", "\\boxed{7}, no wait, \\boxed{3}", 0.0),
    ("\\text{Monday}", "\\boxed{\\text{Monday}}", 1.0),
    ("12", "\\boxed{13}", 0.0),
]


def test_math_reward_tricky_answers(grader):
    golds = [g for g, _, _ in TRICKY]
    completions = [c for _, c, _ in TRICKY]
    result = math_reward(completions, golds, grader=grader)
    assert isinstance(result, RewardResult)
    assert result.scores.dtype == np.float32 and result.scores.shape == (len(TRICKY),)
    for (gold, completion, expected), score, d in zip(TRICKY, result.scores, result.details):
        assert score == expected, (gold, completion, d)
        assert not d["timeout"] and not d["no_answer"] and not d["unclosed_box"]


def test_math_reward_failure_flags(grader):
    completions = ["I think it is 7", "\\boxed{7", "\\boxed{}", "\\boxed{@@}", "\\boxed{7}"]
    result = math_reward(completions, ["7"] * 5, grader=grader)
    np.testing.assert_array_equal(result.scores, np.array([0, 0, 0, 0, 1], np.float32))
    flags = [{k: d[k] for k in MATH_FLAGS} for d in result.details]
    assert flags[0] == {"no_answer": True, "unclosed_box": False, "timeout": False, "parse_error": False}
    assert flags[1] == {"no_answer": False, "unclosed_box": True, "timeout": False, "parse_error": False}
    assert flags[2] == {"no_answer": True, "unclosed_box": False, "timeout": False, "parse_error": False}
    assert flags[3] == {"no_answer": False, "unclosed_box": False, "timeout": False, "parse_error": True}
    assert [d["extracted"] for d in result.details] == [None, None, "", "@@", "7"]
    metrics = reward_metrics(result, prefix="math/")
    assert metrics == pytest.approx({"math/accuracy": 1 / 5, "math/no_answer_rate": 2 / 5,
                                     "math/unclosed_box_rate": 1 / 5, "math/timeout_rate": 0.0,
                                     "math/parse_error_rate": 1 / 5})


def test_math_reward_rejects_mismatched_lengths(grader):
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        math_reward(["\\boxed{1}", "\\boxed{2}"], ["1"], grader=grader)


def test_exact_matches_skip_the_pool(grader):
    before = grader.stats().get("items", 0)
    result = math_reward(["\\boxed{\\dfrac{1}{2}}", "\\boxed{ 42 }"], ["$\\frac{1}{2}$", "\\boxed{42}"],
                         grader=grader)
    np.testing.assert_array_equal(result.scores, [1.0, 1.0])
    assert grader.stats().get("items", 0) == before


def test_integer_pairs_are_compared_without_the_pool(grader):
    before = grader.stats().get("items", 0)
    result = math_reward(["\\boxed{41}", "\\boxed{-7}", "\\boxed{007}", "\\boxed{ 12 }", "\\boxed{-0}"],
                         ["42", "-7", "7", "$12$", "0"], grader=grader)
    np.testing.assert_array_equal(result.scores, [0.0, 1.0, 1.0, 1.0, 1.0])
    assert grader.stats().get("items", 0) == before
    # anything that is not a plain integer on both sides still goes to the math-verify worker
    result = math_reward(["\\boxed{12.0}", "\\boxed{\\frac{24}{2}}", "\\boxed{13}"], ["12", "12", "\\frac{26}{2}"],
                         grader=grader)
    np.testing.assert_array_equal(result.scores, [1.0, 1.0, 1.0])
    assert grader.stats()["items"] == before + 3


def test_pathological_power_times_out_and_pool_recovers(grader):
    grader.start()
    completions = ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{\\frac{1}{2}}"]
    start = time.perf_counter()
    result = math_reward(completions, ["5", "0.5"], grader=grader)
    elapsed = time.perf_counter() - start
    assert elapsed < TIMEOUT_S + GRACE_S + 4.0  # + slack for a loaded CI machine
    assert result.scores[0] == 0.0 and result.details[0]["timeout"] is True
    assert result.scores[1] == 1.0 and result.details[1]["timeout"] is False
    # the pool answers normally afterwards
    after = math_reward(["\\boxed{0.25}", "\\boxed{2}"], ["\\frac14", "3"], grader=grader)
    np.testing.assert_array_equal(after.scores, [1.0, 0.0])
    assert not any(d["timeout"] for d in after.details)
    assert reward_metrics(result)["timeout_rate"] == 0.5


# ---------------------------------------------------------------------------------------------------------------
# The pool itself
# ---------------------------------------------------------------------------------------------------------------
def test_hard_timeout_kills_stuck_worker(grader):
    grader.start()
    # Each worker imports this test module once to unpickle `_stuck_in_c`; keep that out of the timed call.
    assert [o.status for o in grader.run(_stuck_in_c, [(0.0,), (0.0,)], timeout_s=60.0)] == ["ok", "ok"]
    pids_before = set(grader.worker_pids)
    kills_before = grader.stats().get("hard_kills", 0)
    start = time.perf_counter()
    outcomes = grader.run(_stuck_in_c, [(60.0,), (0.0,)], timeout_s=0.5)
    elapsed = time.perf_counter() - start
    assert outcomes[0].status == "timeout" and "hard" in outcomes[0].error
    assert outcomes[1].status == "ok" and outcomes[1].value == "finished"
    assert elapsed < 0.5 + GRACE_S + 4.0
    assert grader.stats()["hard_kills"] == kills_before + 1
    assert set(grader.worker_pids) != pids_before  # the stuck one was replaced
    assert len(grader.worker_pids) == grader.num_workers
    assert grader.run(_stuck_in_c, [(0.0,)])[0].value == "finished"


def test_soft_timeout_keeps_the_worker(grader):
    grader.start()
    assert [o.status for o in grader.run(_stuck_in_c, [(0.0,), (0.0,)], timeout_s=60.0)] == ["ok", "ok"]
    # Both workers now run a task that blocks SIGALRM and lets the alarm fire while it is blocked.
    assert [o.status for o in grader.run(_stuck_in_c, [(0.4,), (0.4,)], timeout_s=0.2)] == ["ok", "ok"]
    pids = set(grader.worker_pids)
    outcomes = grader.run(time.sleep, [(30.0,), (30.0,)], timeout_s=0.3)
    assert [(o.status, o.error) for o in outcomes] == [("timeout", "soft timeout in worker")] * 2
    assert set(grader.worker_pids) == pids


def test_crash_and_error_are_results_not_exceptions(grader):
    outcomes = grader.run(_die, [(3,)])
    assert outcomes[0].status == "crashed" and "exit code 3" in outcomes[0].error
    outcomes = grader.run(_raise, [("bad input",)])
    assert outcomes[0].status == "error" and outcomes[0].error == "ValueError: bad input"
    assert grader.run(abs, [(-2,)])[0].value == 2
    # a lambda cannot be pickled; it fails alone and the other items still run
    outcomes = grader.run(abs, [(-1,), (lambda: 0,), (-3,)])
    assert [o.status for o in outcomes] == ["ok", "error", "ok"] and "cannot send" in outcomes[1].error


def test_start_waits_for_all_workers():
    with MathGrader(num_workers=2, preload=()) as g:
        g.start()
        assert len(g.worker_pids) == 2
        assert all(w.ready for w in g._workers)


def test_workers_are_recycled():
    with MathGrader(num_workers=1, max_tasks_per_worker=2, preload=()) as g:
        pids = [o.value for o in g.run(os.getpid, [()] * 5)]
        assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
        assert g.stats()["workers_recycled"] == 2
    assert g.worker_pids == []


def test_invalid_settings():
    with pytest.raises(ValueError, match="num_workers"):
        MathGrader(num_workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        MathGrader(timeout_s=0)


def test_default_grader_is_shared_and_lazy():
    g = default_grader()
    assert g is default_grader()


# ---------------------------------------------------------------------------------------------------------------
# Equivalence for majority voting
# ---------------------------------------------------------------------------------------------------------------
def test_answers_equivalent(grader):
    assert answers_equivalent("0.5", "\\frac{1}{2}", grader=grader)
    assert answers_equivalent("$\\dfrac{3}{4}$", "\\boxed{0.75}", grader=grader)
    assert not answers_equivalent("0.5", "0.6", grader=grader)
    assert not answers_equivalent("9^{9^{9^{9}}}", "7", grader=grader, timeout_s=0.5)  # timeout -> not equal


def test_equivalence_classes(grader):
    answers = ["1/2", "0.5", "\\frac{1}{2}", "3", "3.0", None, "", "\\dfrac{1}{2}", "4", "(1,2]", "(1, 2]"]
    ids = equivalence_classes(answers, grader=grader)
    assert ids == [0, 0, 0, 1, 1, -1, -1, 0, 2, 3, 3]
    hits = grader.stats().get("cache_hits", 0)
    assert equivalence_classes(answers, grader=grader) == ids
    assert grader.stats()["cache_hits"] > hits  # pairwise checks are cached across calls


def test_last_number_extraction():
    assert last_number("70 + 78 = 148.") == "148"
    assert last_number("a total of 1,234,567 apples") == "1234567"
    assert last_number("ratio 3/4") == "3/4"
    assert last_number("pi is 3.14.") == "3.14"
    assert last_number("so it is -7") == "-7"
    assert last_number("x2 and v1.5") is None  # digits inside identifiers are not answers
    assert last_number("no digits") is None and last_number(None) is None


def test_math_reward_last_number_fallback_only_without_a_box(grader):
    completions = ["so 70 + 78 = 148", "\\boxed{} and then 148", "\\boxed{147}, not 148", "nothing", "\\boxed{148"]
    strict = math_reward(completions, ["148"] * 5, grader=grader)
    np.testing.assert_array_equal(strict.scores, np.zeros(5, np.float32))
    flexible = math_reward(completions, ["148"] * 5, grader=grader, extraction="boxed_or_last_number")
    # A non-empty box always wins over a later number; an empty or missing box falls back to the last number.
    np.testing.assert_array_equal(flexible.scores, np.array([1, 1, 0, 0, 1], np.float32))
    assert [d["from_last_number"] for d in flexible.details] == [True, True, False, False, True]
    assert flexible.details[3]["no_answer"] and not flexible.details[0]["no_answer"]
    with pytest.raises(ValueError, match="extraction='last'"):
        math_reward(["1"], ["1"], grader=grader, extraction="last")
