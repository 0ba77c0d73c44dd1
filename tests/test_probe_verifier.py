"""The error sorter of experiments/research/probe_verifier.py: which kind of slip made a compact `+` chain wrong."""
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import probe_verifier  # noqa: E402

OPERANDS = [4, 9, 2, 7]
RIGHT = "4 + 9 = 13\n13 + 2 = 15\n15 + 7 = 22\n\\boxed{22}"


@pytest.mark.parametrize("solution,kind", [
    ("4 + 9 = 13\n13 + 2 = 16\n16 + 7 = 23\n\\boxed{23}", "arith"),  # a wrong sum, carried on faithfully
    ("4 + 9 = 13\n13 + 3 = 16\n16 + 7 = 23\n\\boxed{23}", "copy"),  # operand 2 copied as 3
    ("4 + 9 = 13\n14 + 2 = 16\n16 + 7 = 23\n\\boxed{23}", "copy"),  # running total not carried over
    ("4 + 9 = 13\n13 + 7 = 20\n\\boxed{20}", "nsteps"),  # one operand dropped
    ("4 + 9 = 13\n13 + 2 = 15\n15 + 7 = 22\n\\boxed{21}", "box"),  # a right chain, a different box
])
def test_classify_compact_error(solution, kind):
    assert probe_verifier.classify_compact_error(solution, OPERANDS) == kind


def test_error_table_counts_kinds_and_repeated_wrong_answers():
    q = "What is 4 + 9 + 2 + 7?"
    arith = "4 + 9 = 13\n13 + 2 = 16\n16 + 7 = 23\n\\boxed{23}"
    copy = "4 + 9 = 13\n13 + 3 = 16\n16 + 7 = 23\n\\boxed{23}"
    drop = "4 + 9 = 13\n13 + 7 = 20\n\\boxed{20}"
    # question 1: two wrong samples with one answer (23) -> repeated; question 2: 23 and 20 -> all different
    solutions = [RIGHT, arith, copy, RIGHT, arith, drop]
    labels = [True, False, False, True, False, False]
    table = probe_verifier.error_table([q] * 6, solutions, labels, samples_per_question=3)
    assert table["kinds"] == {"arith": 2, "copy": 1, "nsteps": 1}
    assert table["questions_with_2plus_wrong"] == {"repeated": 1, "all_different": 1}


def test_cut_after_slip_keeps_lines_up_to_the_first_difference():
    slipped = "4 + 9 = 13\n13 + 2 = 16\n16 + 7 = 23\n\\boxed{23}"
    assert probe_verifier.cut_after_slip(RIGHT, slipped) == ("4 + 9 = 13\n13 + 2 = 15", "4 + 9 = 13\n13 + 2 = 16")


@pytest.mark.parametrize("kinds,sorted_as", [(("result",), "arith"), (("operand",), "copy")])
def test_slipped_solutions_sort_as_the_slip_they_carry(kinds, sorted_as):
    """The generator's slips are the kinds the error sorter finds in the policy's own wrong samples."""
    import numpy as np

    from jaxrl_reason.data.arithmetic import slipped_solution

    rng = np.random.default_rng(0)
    for seed in range(40):
        operands = [int(x) for x in np.random.default_rng(seed).integers(0, 10, size=5)]
        text, _ = slipped_solution(operands, ["+"] * 4, rng, style="compact", kinds=kinds)
        assert probe_verifier.classify_compact_error(text, operands) == sorted_as, text


def test_init_needs_a_run_that_finished_its_warm_up(tmp_path, monkeypatch):
    os.makedirs(tmp_path / "sft_model")
    monkeypatch.setattr(sys, "argv", ["probe_verifier.py", "--init", str(tmp_path), "--pairs-only"])
    with pytest.raises(SystemExit, match="sft_model/config.json is missing"):
        probe_verifier.main()


@pytest.mark.parametrize("solution,kind", [
    ("4 + 9 = 13\n13 + 3 = 16\n16 + 7 = 23\n\\boxed{23}", "not_in_question"),  # 3 is nowhere in the question
    ("4 + 9 = 13\n13 + 7 = 20\n20 + 7 = 27\n\\boxed{27}", "later_operand"),  # jumped ahead to the last operand
    ("4 + 9 = 13\n13 + 9 = 22\n22 + 7 = 29\n\\boxed{29}", "earlier_operand"),  # repeated the operand before
    ("4 + 9 = 13\n14 + 2 = 16\n16 + 7 = 23\n\\boxed{23}", "running_total"),
])
def test_copy_error_kind(solution, kind):
    assert probe_verifier.classify_compact_error(solution, OPERANDS) == "copy"
    assert probe_verifier.copy_error_kind(solution, OPERANDS) == kind


def test_copy_error_kind_refuses_a_chain_without_a_copy_error():
    with pytest.raises(ValueError, match="not a copy error"):
        probe_verifier.copy_error_kind(RIGHT, OPERANDS)


def test_majority_error_report_sorts_the_answers_that_win_a_wrong_vote():
    q = "What is 4 + 9 + 2 + 7?"
    copy = "4 + 9 = 13\n13 + 3 = 16\n16 + 7 = 23\n\\boxed{23}"
    arith = "4 + 9 = 13\n13 + 2 = 16\n16 + 7 = 23\n\\boxed{23}"  # the same wrong answer by another error
    drop = "4 + 9 = 13\n13 + 7 = 20\n\\boxed{20}"
    rows = [
        # a wrong majority (23, three samples) beside one right sample: its samples are what weighting must outvote
        {"question": q, "completions": [copy, copy, arith, RIGHT, drop], "correct": [0, 0, 0, 1, 0],
         "classes": [0, 0, 0, 1, 2]},
        # a right majority: its wrong samples count, but not as a winning wrong answer
        {"question": q, "completions": [RIGHT, RIGHT, drop], "correct": [1, 1, 0], "classes": [0, 0, 1]},
        # every sample wrong: no right sample to rescue
        {"question": q, "completions": [copy, copy], "correct": [0, 0], "classes": [0, 0]},
    ]
    report = probe_verifier.majority_error_report(rows)
    assert report["wrong"] == {"copy": 4, "arith": 1, "nsteps": 2}
    assert report["copy"] == {"not_in_question": 4}
    assert report["winning_wrong"] == {"copy": 2, "arith": 1}
    assert report["questions_majority_wrong_with_a_right_sample"] == 1
