"""experiments/research/bench_cure.py: the issue's four checks from two arms' evaluations."""
import os
import sys

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import bench_cure  # noqa: E402


def arm(pass1, acc0, acc1, f1, well_formed):
    return {"pass1": pass1, "refinement": {"rows": [{"acc": acc0}, {"acc": acc1, "verdict_f1_strict": f1,
                                                                     "well_formed": well_formed}]}}


def test_checks_compare_cure_with_grpo():
    c = bench_cure.checks(arm(0.40, 0.40, 0.38, 0.30, 0.50), arm(0.39, 0.39, 0.45, 0.60, 0.95))
    assert c["cure_gain"] == 0.45 - 0.39 and c["grpo_gain"] == 0.38 - 0.40
    assert c["gain_positive_and_larger"] and c["f1_higher"] and c["well_formed_90"] and c["pass1_within_2"]
    # a CURE model that loses accuracy by refining, critiques worse, or forgets how to solve fails each check
    c = bench_cure.checks(arm(0.40, 0.40, 0.38, 0.70, 0.99), arm(0.37, 0.37, 0.36, 0.60, 0.80))
    assert not (c["gain_positive_and_larger"] or c["f1_higher"] or c["well_formed_90"] or c["pass1_within_2"])


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


def test_paired_intervals_resample_the_same_questions_for_both_arms():
    """GRPO: refinement gains nothing, every verdict right (F1 1). CURE: round 1 fixes 10 of 40 (+25 points) and
    its critic flags 5 right answers too (precision 20 / 25, F1 0.889): the gain's interval lies above zero and
    the F1's below; identical arms differ by exactly zero; an evaluation without per-example records has none."""
    wrong = list(range(20, 40))
    grpo = refine_eval(20, 20, wrong)
    cure = refine_eval(20, 30, list(range(5)) + wrong)
    d = bench_cure.paired(grpo, cure, draws=500, seed=0)
    gain, f1 = d["gain"], d["f1"]
    assert d["questions"] == 40 and np.isclose(gain["diff"], 0.25) and np.isclose(f1["diff"], 2 * 0.8 / 1.8 - 1)
    assert 0 < gain["95"][0] < gain["diff"] < gain["95"][1]
    assert f1["95"][0] < f1["diff"] < f1["95"][1] < 0
    line = bench_cure.interval_line("seed 0", d, bench_cure.PAIRED, (100, 1))
    assert line.startswith("- seed 0: gain +25.0 [+") and "; f1 -0.111 [-" in line
    same = bench_cure.paired(grpo, grpo, draws=50)
    assert same["gain"]["95"] == same["f1"]["95"] == [0.0, 0.0]
    assert bench_cure.paired({"refinement": {"rows": []}}, cure) is None
    with pytest.raises(ValueError, match="evaluated on 40 and 30 questions"):
        bench_cure.paired(grpo, refine_eval(20, 20, wrong[:10], n=30))


def test_pooled_interval_averages_the_seeds_differences():
    """Seed 0 as above (gain +25 points); seed 1 two identical arms (0): the mean over seeds is +12.5 points with
    its interval above zero; a seed without per-example records gives no pooled interval."""
    wrong = list(range(20, 40))
    grpo, cure = refine_eval(20, 20, wrong), refine_eval(20, 30, list(range(5)) + wrong)
    d = bench_cure.pooled({0: {"grpo": grpo, "cure": cure}, 1: {"grpo": grpo, "cure": grpo}}, draws=300)
    assert d["seeds"] == 2 and d["questions"] == 80 and np.isclose(d["gain"]["diff"], 0.125)
    assert 0 < d["gain"]["95"][0] < 0.125 < d["gain"]["95"][1]
    assert bench_cure.pooled({0: {"grpo": {"refinement": {"rows": []}}, "cure": cure}}) is None


def test_the_resample_reference_puts_guided_re_solves_beside_fresh_samples():
    """40 questions, right first on 0-19; round 1 sends back 5 right (0-4) and the 20 wrong, fixes 10 of the wrong
    (20-29) and keeps every right one. The pool's other 3 samples: right on one of them for questions 20-39, on all
    three for 0-19 -- a fresh sample fixes 1/3 of the wrong, a guided re-solve 1/2."""
    ev = refine_eval(20, 30, list(range(5)) + list(range(20, 40)))
    pool = np.zeros((40, 4), bool)
    pool[:20] = True
    pool[20:, 1] = True
    r = bench_cure.resample_reference(ev["refinement"], pool)
    assert (r["redone_wrong"], r["redone_right"]) == (20, 5)
    assert np.isclose(r["fix"], 0.5) and np.isclose(r["resample_fix"], 1 / 3)
    assert r["keep"] == 1.0 and r["resample_keep"] == 1.0
    assert bench_cure.resample_cells({"resample": r}) == "20: 0.500 / 0.333 | 5: 1.000 / 1.000"
    assert bench_cure.resample_cells({}) == "- | -"
    nobody = bench_cure.resample_reference(refine_eval(20, 20, [])["refinement"], pool)
    assert nobody["redone_wrong"] == 0 and np.isnan(nobody["fix"]) and np.isnan(nobody["resample_fix"])
    with pytest.raises(ValueError, match="are not refinement's round 0"):
        bench_cure.resample_reference(ev["refinement"], ~pool)
    with pytest.raises(ValueError, match=r"must be \[40 questions, >= 2 samples\]"):
        bench_cure.resample_reference(ev["refinement"], pool[:, :1])

def test_a_refinement_result_round_trips_through_its_per_example_record():
    from jaxrl_reason.inference.refine import RefineResult

    res = RefineResult.from_per_example(refine_eval(3, 5, [4, 6], n=8)["refinement"]["per_example"])
    assert res.accuracy.tolist() == [3 / 8, 5 / 8] and res.verdicts.dtype == np.int8
    again = RefineResult.from_per_example(res.per_example())
    assert all(np.array_equal(getattr(res, k), getattr(again, k)) for k in ("correct", "verdicts", "well_formed"))
    picked = res.take([4, 4, 0])  # a bootstrap draw repeats examples
    assert picked.correct.tolist() == [[False, False, True], [True, True, True]]  # 4: fixed in round 1
    assert picked.verdicts[0].tolist() == [1, 1, 0] and len(picked.solutions) == 3


# ------------------------------------------------------------------------------ refine_probe.py's counts

import types  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import refine_probe  # noqa: E402
from jaxrl_reason.configs import config_path, load_config_file
from jaxrl_reason.data.prompts import critique_prompt, guided_prompt, solve_prompt  # noqa: E402
from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer  # noqa: E402
from jaxrl_reason.rewards.base import RewardResult  # noqa: E402

HINT = "write each row again and check that no digit repeats in it before you give the answer"
CONFIG = config_path("cure")


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
    c = refine_probe.probe(cfg, None, tokenizer, examples, task, generate=generate)
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
    assert refine_probe.check_outcome(check, check + verdict) == "exact"
    head, _, mark = lines[1].rpartition(" ")
    miscopied = head[:-1] + ("A" if head[-1] != "A" else "B") + " " + mark  # the row rewritten, still marked ok
    assert refine_probe.check_outcome(check, "\n".join(lines[:1] + [miscopied] + lines[2:]) + verdict) == "copy"
    marked = "\n".join(lines[:5] + [lines[5].rpartition(" ")[0] + " repeat"] + lines[6:])
    assert refine_probe.check_outcome(check, marked + verdict) == "mark"
    assert refine_probe.check_outcome(check, "\n".join(lines[:3] + lines[4:]) + verdict) == "lines"
    assert refine_probe.check_outcome(check, "ERROR_FOUND: true") == "lines"
    # the first fault in line order names the kind
    assert refine_probe.check_outcome(check, "\n".join([lines[0], miscopied, lines[2], lines[3], lines[4],
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
    cfg = load_config_file(config_path("testbed_latin_cure_check"))
    c = refine_probe.probe(cfg, None, tokenizer, examples, task, generate=generate, initial=[right, wrong],
                           initial_tokens=[5, 5])
    assert drawn[:2] == ["critique", "critique"]  # no round-0 solve: the attempts were given
    assert (c["round0"], c["right_redone"], c["wrong_redone"]) == (0.5, 1, 1)
    assert c["checks"]["right_redone"] == {"exact": 0, "lines": 0, "copy": 1, "mark": 0}
    assert c["checks"]["wrong_redone"] == {"exact": 1, "lines": 0, "copy": 0, "mark": 0}
    assert sum(sum(v.values()) for v in c["checks"].values()) == 2

# ------------------------------------------------------------------------------ the baseline arm's warm-up


@pytest.mark.parametrize("preset, layout", [("testbed_latin_cure", "first"), ("testbed_latin_cure_check", "after")])
def test_the_grpo_arm_warms_up_in_the_cure_arms_guided_layout(preset, layout):
    """The GRPO arm trains the warm-up both arms start from (`against_grpo.train_arms`); its guided re-solve rows
    must be posed as the CURE arm's RL and both arms' refinement pose them. When the layout was a CURE method knob,
    the plain arm's method reset dropped it: the warm-up taught "after" while everything after it asked "first",
    and the re-solve fixed 0 of 51 flagged wrong attempts (docs/results/cure_testbed.md)."""
    import importlib

    from bench_rlv import as_plain_grpo
    from jaxrl_reason.experiment.data import row_formats
    from jaxrl_reason.experiment.pipeline import start

    get_config = importlib.import_module(f"jaxrl_reason.configs.{preset}").get_config
    cure_rc, cure = start(get_config())
    plain = get_config()
    as_plain_grpo(plain, verify_warmup=True)
    grpo_rc, grpo = start(plain)
    assert (type(cure).__name__, type(grpo).__name__) == ("CURE", "GRPO")
    assert grpo_rc.data.guided_layout == cure_rc.data.guided_layout == layout
    assert row_formats(cure_rc.data).guided_layout == layout
    assert grpo_rc.sft == cure_rc.sft  # the same warm-up, guided rows included


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
