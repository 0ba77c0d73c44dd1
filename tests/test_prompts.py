"""Prompt templates: required fields and exact phrases (the specs of docs/methods/README.md;
docs/tasks/README.md#spec-prompt-templates), and critique parsing."""
from __future__ import annotations

import pytest

from jaxrl_reason.data.prompts import (CODE_INSTRUCTION, CRITIQUE_FIELDS, SOLVE_INSTRUCTION, VERIFY_QUESTION,
                                       Critique, code_correction_prompt, code_solve_prompt, correction_prompt,
                                       critique_format_penalty, critique_prompt, critique_verdict_prefix,
                                       guided_prompt, parse_critique, solve_prompt, verify_prompt,
                                       whole_turn_prompt_fn)

Q = "What is 17 + 25?"
SOL = "17 + 25 = 32, so the answer is \\boxed{32}."


def test_exact_phrases():
    assert SOLVE_INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."
    assert VERIFY_QUESTION == "Is this solution correct? Answer Yes or No."
    assert CRITIQUE_FIELDS == ("ERROR_FOUND", "ERROR_QUOTE", "WHY_IT_MATTERS", "HIGH_LEVEL_HINT")


def test_solve_prompt():
    assert solve_prompt(Q) == Q + "\n\n" + SOLVE_INSTRUCTION
    assert solve_prompt("  " + Q + "\n") == solve_prompt(Q)


def test_verify_prompt_ends_with_the_question():
    p = verify_prompt(Q, SOL)
    assert p.endswith("\n\nIs this solution correct? Answer Yes or No.")
    assert p.index(Q) < p.index(SOL) < p.index(VERIFY_QUESTION)
    # an empty generation is a legitimate (wrong) sample, not an error
    assert verify_prompt(Q, "").endswith(VERIFY_QUESTION)


def test_critique_prompt_and_prefix():
    p = critique_prompt(Q, SOL)
    assert p.index(Q) < p.index(SOL)
    positions = [p.index(f + ":", p.index(SOL)) for f in CRITIQUE_FIELDS]
    assert positions == sorted(positions)  # the fields are listed in order, after the solution
    assert "earliest error" in p
    assert critique_verdict_prefix(True) == "ERROR_FOUND: true\n"
    assert critique_verdict_prefix(False) == "ERROR_FOUND: false\n"
    with pytest.raises(TypeError, match="error_found"):
        critique_verdict_prefix(1)  # type: ignore[arg-type]


def test_guided_prompt_shows_hint_not_attempt():
    hint = "Add the tens and the ones separately and then combine the two partial sums."
    p = guided_prompt(Q, hint)
    assert Q in p and hint in p and p.endswith(SOLVE_INSTRUCTION)
    assert "32" not in p  # the wrong attempt's answer cannot leak: the function has no attempt argument


def test_guided_prompt_layout_first_puts_the_hint_before_an_unchanged_solve_prompt():
    hint = "Add the tens and the ones separately and then combine the two partial sums."
    p = guided_prompt(Q, hint, layout="first")
    assert p.endswith(solve_prompt(Q)) and p.index(hint) < p.index(Q)
    assert guided_prompt(Q, hint) == guided_prompt(Q, hint, layout="after") != p
    with pytest.raises(ValueError, match="layout must be one of"):
        guided_prompt(Q, hint, layout="before")


def test_correction_prompt():
    p = correction_prompt(Q, SOL)
    assert p.index(Q) < p.index(SOL)
    assert "corrected, complete solution" in p and p.endswith(SOLVE_INSTRUCTION)


def test_code_prompts():
    problem = "Read n and print n squared."
    p = code_solve_prompt(problem)
    assert p.startswith(problem) and p.endswith(CODE_INSTRUCTION)
    assert "exactly one fenced code block" in p and "```python" in p
    buggy = "n = int(input())\nprint(n * 2)"
    p = code_correction_prompt(problem, buggy)
    assert "```python\n" + buggy + "\n```" in p
    assert p.rstrip().endswith("starts with ```python and ends with ```.")


def test_code_correction_fence_cannot_be_closed_by_the_program():
    buggy = 'print("```")\nx = 1'
    p = code_correction_prompt("Print three backticks.", buggy)
    assert "````python\n" + buggy + "\n````" in p


def test_templates_reject_bad_dataset_fields():
    with pytest.raises(TypeError, match="`question` must be a str"):
        solve_prompt(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`question` is empty"):
        verify_prompt("   ", SOL)
    with pytest.raises(ValueError, match="`problem` is empty"):
        code_solve_prompt("")
    with pytest.raises(TypeError, match="`solution` must be a str"):
        critique_prompt(Q, ["tokens"])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# parse_critique
# ---------------------------------------------------------------------------------------------------------------
GOOD = ("ERROR_FOUND: true\n"
        "ERROR_QUOTE: 17 + 25 = 32\n"
        "WHY_IT_MATTERS: The ones digits sum to 12, so a carry is needed;\nthe final answer is off by ten.\n"
        "HIGH_LEVEL_HINT: Add the ones column first and remember to carry the extra ten into the tens column.")


def test_parse_well_formed():
    c = parse_critique(GOOD)
    assert c == Critique(
        error_found=True, quote="17 + 25 = 32",
        why="The ones digits sum to 12, so a carry is needed;\nthe final answer is off by ten.",
        hint="Add the ones column first and remember to carry the extra ten into the tens column.",
        format_errors=(), hint_words=16)
    assert critique_format_penalty(c) == 0.0


def test_parse_no_error_critique():
    c = parse_critique("ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: N/A\nHIGH_LEVEL_HINT: none")
    assert c.error_found is False and c.quote == "" and c.why == "" and c.hint == ""
    # an empty quote is right when there is no error; a hint is asked for all the same
    # (docs/methods/cure.md#spec-critique)
    assert c.format_errors == ("empty HIGH_LEVEL_HINT",)
    assert critique_format_penalty(c) == pytest.approx(-0.25)


def test_short_hint_is_penalised_for_every_critique():
    # the authors' rule: fewer than 10 words costs -0.25 whatever the verdict (before: only when an error is claimed)
    c = parse_critique("ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: none\nHIGH_LEVEL_HINT: check it")
    assert c.format_errors == ("short HIGH_LEVEL_HINT",) and c.hint_words == 2
    assert critique_format_penalty(c) == pytest.approx(-0.25)
    long = "ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: none\nHIGH_LEVEL_HINT: " + GOOD.split(": ")[-1]
    assert critique_format_penalty(parse_critique(long)) == 0.0


def test_a_critique_that_copies_the_prompt_template_back_is_not_well_formed():
    # What SmolLM2-135M-Instruct writes when its reply is primed with "ERROR_FOUND:" (docs/results/
    # smollm2_critique.md): the field list of the prompt, copied. It names no verdict and critiques nothing.
    echo = critique_prompt(Q, SOL).split("each starting on its own line:\n")[1]
    c = parse_critique(echo)
    assert c.error_found is None
    assert c.format_errors == ("template ERROR_QUOTE", "template WHY_IT_MATTERS", "template HIGH_LEVEL_HINT",
                               "bad ERROR_FOUND value")
    assert critique_format_penalty(c) == pytest.approx(-0.75)
    # a real verdict followed by a copied hint: the verdict stands, the hint is penalised
    one = parse_critique(GOOD.split("HIGH_LEVEL_HINT:")[0] + "HIGH_LEVEL_HINT: " + echo.split("HIGH_LEVEL_HINT: ")[1])
    assert one.error_found is True and one.format_errors == ("template HIGH_LEVEL_HINT",)
    assert critique_format_penalty(one) == pytest.approx(-0.25)
    assert parse_critique("ERROR_FOUND: False or true\n").error_found is None


def test_quote_under_five_characters_is_empty_when_an_error_is_claimed():
    rest = "\nWHY_IT_MATTERS: the carry\nHIGH_LEVEL_HINT: " + GOOD.split("HIGH_LEVEL_HINT: ")[1]
    c = parse_critique("ERROR_FOUND: true\nERROR_QUOTE: 3+4" + rest)
    assert c.quote == "3+4" and c.format_errors == ("empty ERROR_QUOTE",)
    assert critique_format_penalty(c) == pytest.approx(-0.5)
    assert critique_format_penalty(parse_critique("ERROR_FOUND: true\nERROR_QUOTE: 3 + 4" + rest)) == 0.0  # 5 chars
    assert critique_format_penalty(parse_critique("ERROR_FOUND: false\nERROR_QUOTE: 3+4" + rest)) == 0.0


def test_hint_is_the_text_after_the_last_label():
    text = GOOD + "\n\nLet me restate.\nHIGH_LEVEL_HINT: Check each column sum against a rough estimate of the total."
    c = parse_critique(text)
    assert c.hint == "Check each column sum against a rough estimate of the total."
    # anywhere in a line, as the authors' search; the field before it stops there
    c = parse_critique("ERROR_FOUND: true\nERROR_QUOTE: 17 + 25 = 32\nWHY_IT_MATTERS: no carry. "
                       "**HIGH_LEVEL_HINT:** carry the ten")
    assert c.why == "no carry." and c.hint == "carry the ten"


def test_missing_hint_costs_the_short_hint_penalty():
    c = parse_critique(GOOD.split("\nHIGH_LEVEL_HINT")[0])
    assert c.hint is None and c.format_errors == ("missing HIGH_LEVEL_HINT",)
    assert critique_format_penalty(c) == pytest.approx(-0.25)  # as the authors' code (not the -0.5 of a field)


def test_parse_markdown_and_case():
    text = ("- **Error_Found:** TRUE.\n* **ERROR_QUOTE**: `17 + 25 = 32`\n"
            "### WHY_IT_MATTERS: carry dropped\nHIGH_LEVEL_HINT: \"work column by column from the right "
            "and track every carry explicitly\"")
    c = parse_critique(text)
    assert c.error_found is True
    assert c.quote == "17 + 25 = 32" and c.why == "carry dropped"
    assert c.hint == "work column by column from the right and track every carry explicitly"
    assert c.format_errors == ()


def test_parse_first_verdict_wins():
    # the teacher-forced prefix comes first; a later contradicting line written by the model does not override it
    c = parse_critique(critique_verdict_prefix(True) + "ERROR_FOUND: false\n" + GOOD.split("\n", 1)[1])
    assert c.error_found is True


def test_parse_partial():
    c = parse_critique("ERROR_FOUND: true\nERROR_QUOTE:\nHIGH_LEVEL_HINT: carry the ten")
    assert c.error_found is True and c.quote == "" and c.why is None and c.hint == "carry the ten"
    assert c.hint_words == 3
    assert set(c.format_errors) == {"missing WHY_IT_MATTERS", "empty ERROR_QUOTE", "short HIGH_LEVEL_HINT"}
    assert critique_format_penalty(c) == pytest.approx(-0.75)
    c = parse_critique("ERROR_FOUND: perhaps\n" + GOOD.split("\n", 1)[1])
    assert c.error_found is None and c.format_errors == ("bad ERROR_FOUND value",)
    assert critique_format_penalty(c) == 0.0  # the verdict is teacher-forced in training; not judged


@pytest.mark.parametrize("junk", ["", "I am not sure.", "ERROR_FOUND", ":::", "\x00\x01", None, 42,
                                  "error found: yes, the quote is 17+25"])
def test_parse_garbage(junk):
    c = parse_critique(junk)  # type: ignore[arg-type]
    assert c.error_found is None and c.quote is None and c.hint is None and c.why is None
    assert set(c.format_errors) == {f"missing {f}" for f in CRITIQUE_FIELDS}
    assert critique_format_penalty(c) == pytest.approx(-0.75)  # missing quote / why, and no hint


def test_whole_turn_prompt_fn_passes_whole_turns_through():
    class Row:
        def __init__(self, question):
            self.question = question
    turn = critique_prompt(Q, SOL)
    fn = whole_turn_prompt_fn([Row(turn)], solve_prompt)
    assert fn(turn) == turn  # a check row's question is already its whole user turn
    assert fn(Q) == solve_prompt(Q)  # a plain question still gets the task's template
    assert whole_turn_prompt_fn([], solve_prompt)(turn) == solve_prompt(turn)
