"""What the research probes compute (`experiment.probes`: refine_probe's split of a refinement round, the
worked-check comparisons, own_vs_injected's readings), and a refinement result's per-example record."""
import os
import types

import numpy as np
import pytest

from jaxrl_reason.configs import load_config_file
from jaxrl_reason.data.prompts import critique_prompt, guided_prompt, solve_prompt
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
from jaxrl_reason.experiment import probes
from jaxrl_reason.rewards.base import RewardResult

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jaxrl_reason", "configs")
HINT = "write each row again and check that no digit repeats in it before you give the answer"
CONFIG = os.path.join(CONFIGS, "cure.py")


def refine_eval(first_right: int, refined_right: int, flagged: list, n: int = 40) -> dict:
    """An arm's saved evaluation over `n` questions: right on the first `first_right` first attempts and the first
    `refined_right` after round 1; round 1's critic flags `flagged` and calls the rest right."""
    from jaxrl_reason.inference.refine import RefineResult

    correct = np.zeros((2, n), bool)
    correct[0, :first_right], correct[1, :refined_right] = True, True
    verdicts = np.zeros((1, n), np.int8)
    verdicts[0, flagged] = 1
    res = RefineResult(correct=correct, tokens=np.ones((2, n), np.int64), verdicts=verdicts,
                       stopped=np.where(verdicts[0] == 0, 0, -1), solutions=[""] * n, critiques=[""] * n,
                       well_formed=np.ones((1, n), bool))
    return {"refinement": {"per_example": res.per_example()}}


def test_a_refinement_result_round_trips_through_its_per_example_record():
    from jaxrl_reason.inference.refine import RefineResult

    res = RefineResult.from_per_example(refine_eval(3, 5, [4, 6], n=8)["refinement"]["per_example"])
    assert res.accuracy.tolist() == [3 / 8, 5 / 8] and res.verdicts.dtype == np.int8
    again = RefineResult.from_per_example(res.per_example())
    assert all(np.array_equal(getattr(res, k), getattr(again, k)) for k in ("correct", "verdicts", "well_formed"))
    picked = res.take([4, 4, 0])  # a bootstrap draw repeats examples
    assert picked.correct.tolist() == [[False, False, True], [True, True, True]]  # 4: fixed in round 1
    assert picked.verdicts[0].tolist() == [1, 1, 0] and len(picked.solutions) == 3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    qs = [f"QUESTION[{i}]" for i in range(8)]
    texts = [solve_prompt(q) for q in qs] + [critique_prompt(q, "ANSWER wrong") for q in qs]
    texts += [guided_prompt(q, HINT) for q in qs] + [f"ANSWER {q}" for q in qs]
    return train_tiny_tokenizer(texts, str(tmp_path_factory.mktemp("tok")), vocab_size=512)


def test_refine_probe_splits_the_round_by_first_attempt_and_verdict(tokenizer):
    """8 questions, a scripted policy: first attempts right on 0-3; the critic flags the wrong attempts but 7's, and
    also right 0; guided re-solves come out right on 0 and 4; a fresh unguided sample is right on 5 only."""
    right_first, flagged, guided_right, fresh_right = {0, 1, 2, 3}, {0, 4, 5, 6}, {0, 4}, {5}
    solves = {}

    def generate(prompts, *, max_new_tokens):
        out = []
        for p in prompts:
            text = tokenizer.decode(p)
            q = int(text.split("QUESTION[")[1].split("]")[0])
            if "Find the earliest error" in text:
                reply = (f"ERROR_FOUND: {'true' if q in flagged else 'false'}\nERROR_QUOTE: the answer line\n"
                         f"WHY_IT_MATTERS: y\nHIGH_LEVEL_HINT: {HINT}")
            elif "Guidance for solving" in text:
                reply = f"ANSWER {q if q in guided_right else 'wrong'}"
            else:  # a plain solve: the first attempt, then the fresh sample
                solves[q] = solves.get(q, 0) + 1
                ok = q in (right_first if solves[q] == 1 else fresh_right)
                reply = f"ANSWER {q if ok else 'wrong'}"
            out.append(tokenizer.encode(reply)[:max_new_tokens])
        return out

    def reward_fn(texts, examples):
        return RewardResult(np.array([f"ANSWER {e.answer}" in t for t, e in zip(texts, examples)], np.float32),
                            [{}] * len(texts))

    cfg = load_config_file(CONFIG)
    examples = [types.SimpleNamespace(question=f"QUESTION[{i}]", answer=str(i)) for i in range(8)]
    task = types.SimpleNamespace(prompt_fn=solve_prompt, reward_fn=reward_fn)
    c = probes.probe(cfg, None, tokenizer, examples, task, generate=generate)
    assert (c["round0"], c["round1"]) == (0.5, 5 / 8)  # right: 1, 2, 3 kept; 0 re-solved right; 4 fixed
    assert (c["wrong_redone"], c["fixed"], c["fresh_fixed"], c["wrong_kept"]) == (3, 1, 1, 1)
    assert (c["right_redone"], c["right_stayed"], c["right_kept"]) == (1, 1, 3)
    assert c["well_formed"] == 1.0
    assert sorted(q for q, n in solves.items() if n == 2) == [4, 5, 6]  # the fresh sample: flagged wrong ones only


def latin_check_case():
    """A Latin-square question, its right answer's text and the task's worked check of it."""
    from jaxrl_reason.data.latin_square import latin_square_examples, solution_text
    from jaxrl_reason.data.testbed import critique_check, task_of

    e = latin_square_examples(1, seed=0)[0]
    right = solution_text(list(e.meta["square"]))
    return e, right, critique_check(task_of("latin_square"), e.question, right)


def test_check_outcome_names_the_first_fault_of_a_written_check():
    _, _, check = latin_check_case()
    lines = check.split("\n")
    assert lines[0].endswith(" ok") and len(lines) == 8
    verdict = "\nERROR_FOUND: false"
    assert probes.check_outcome(check, check + verdict) == "exact"
    head, _, mark = lines[1].rpartition(" ")
    miscopied = head[:-1] + ("A" if head[-1] != "A" else "B") + " " + mark  # the row rewritten, still marked ok
    assert probes.check_outcome(check, "\n".join(lines[:1] + [miscopied] + lines[2:]) + verdict) == "copy"
    marked = "\n".join(lines[:5] + [lines[5].rpartition(" ")[0] + " repeat"] + lines[6:])
    assert probes.check_outcome(check, marked + verdict) == "mark"
    assert probes.check_outcome(check, "\n".join(lines[:3] + lines[4:]) + verdict) == "lines"
    assert probes.check_outcome(check, "ERROR_FOUND: true") == "lines"
    # the first fault in line order names the kind
    assert probes.check_outcome(check, "\n".join([lines[0], miscopied, lines[2], lines[3], lines[4],
                                                        marked.split("\n")[5]] + lines[6:])) == "copy"


def test_refine_probe_critiques_the_attempts_it_is_given_and_splits_their_checks(tokenizer):
    """Round 0 from `initial` (no first solve drawn); with a worked-check critique, the critic's check is compared
    with the task's: a right attempt flagged after a miscopied row, a wrong one flagged after an exact check."""
    from jaxrl_reason.data.latin_square import solution_text
    from jaxrl_reason.data.testbed import critique_check, reward, task_of

    latin = task_of("latin_square")
    e, right, check = latin_check_case()
    cells = list(e.meta["square"])
    wrong = solution_text(cells[4:8] + cells[4:])  # row 2 twice: columns repeat
    wrong_check = critique_check(latin, e.question, wrong)
    lines = check.split("\n")
    head, _, mark = lines[0].rpartition(" ")
    miscopied = "\n".join([head[:-1] + ("A" if head[-1] != "A" else "B") + " repeat"] + lines[1:])
    fields = f"ERROR_FOUND: true\nERROR_QUOTE: row\nWHY_IT_MATTERS: y\nHIGH_LEVEL_HINT: {HINT}"
    drawn = []

    def generate(prompts, *, max_new_tokens):
        out = []
        for p in prompts:
            text = tokenizer.decode(p)
            drawn.append("critique" if "Find the earliest error" in text else "solve")
            if "Find the earliest error" in text:
                reply = f"{miscopied if right in text else wrong_check}\n{fields}"
            else:
                reply = right
            out.append(tokenizer.encode(reply))
        return out

    examples = [e, e]
    task = types.SimpleNamespace(prompt_fn=solve_prompt,
                                 reward_fn=lambda texts, exs: reward(latin, texts, exs))
    cfg = load_config_file(os.path.join(CONFIGS, "testbed_latin_cure_check.py"))
    c = probes.probe(cfg, None, tokenizer, examples, task, generate=generate, initial=[right, wrong],
                           initial_tokens=[5, 5])
    assert drawn[:2] == ["critique", "critique"]  # no round-0 solve: the attempts were given
    assert (c["round0"], c["right_redone"], c["wrong_redone"]) == (0.5, 1, 1)
    assert c["checks"]["right_redone"] == {"exact": 0, "lines": 0, "copy": 1, "mark": 0}
    assert c["checks"]["wrong_redone"] == {"exact": 1, "lines": 0, "copy": 0, "mark": 0}
    assert sum(sum(v.values()) for v in c["checks"].values()) == 2


def test_an_unknown_guided_layout_is_refused_at_start():
    from jaxrl_reason.configs.testbed_latin_cure import get_config
    from jaxrl_reason.experiment.pipeline import start

    c = get_config()
    c.data.guided_layout = "before"
    with pytest.raises(ValueError, match="data.guided_layout='before' is unknown; use after | first"):
        start(c)
    c = get_config()
    c.method.extra.guided_layout = "first"  # where the knob used to live
    with pytest.raises(ValueError, match="method.extra.guided_layout was removed .* set data.guided_layout"):
        start(c)


def test_own_vs_injected_distance_and_summary():

    assert probes.positions_off(list("ABCD"), list("ABDC")) == 2
    assert probes.positions_off(list("ABCD"), list("AB")) == 2  # two positions missing
    assert probes.positions_off(list("ABCD"), None) == -1 and probes.positions_off(list("ABCD"), []) == -1
    assert probes.describe([1, 2, 2, 3, -1]) == "median 2 (1.75-2.25), range 1-3"
    assert probes.describe([-1]) == "none"


def test_own_vs_injected_reads_a_worked_check_correction():
    """check_reading: a correction whose check is the task's and flags the fault, then a rewritten grid; one that
    copies the attempt right but marks every line ok and returns the attempt; reading_row counts them."""
    from jaxrl_reason.data.latin_square import latin_square_examples
    from jaxrl_reason.data.testbed import correction_target, task_of

    task = task_of("latin_square")
    e, other = latin_square_examples(2, seed=3)
    wrong = other.solution  # the other question's grid: its givens changed here
    true_check = task.check_text(e.question, task.parse(wrong))
    assert any(line.rpartition(" ")[2] != "ok" for line in true_check.split("\n"))
    good = correction_target(task, e.question, task.parse(wrong), e.solution, "worked_check")
    assert probes.check_reading(task, e.question, wrong, good) == ("exact", True, True)
    blind = "\n".join(line.rpartition(" ")[0] + " ok" for line in true_check.split("\n")) + "\n" + wrong
    assert probes.check_reading(task, e.question, wrong, blind) == ("mark", False, False)
    row = probes.reading_row("own", [("exact", True, True), ("mark", False, False)], [True, False])
    assert row == "| own | 2 | exact 1 · lines 0 · copy 0 · mark 1 | 1 | 1 | 1 | 1 |"
