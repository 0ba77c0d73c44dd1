"""experiments/research/bench_cipo.py: the issue's checks from two arms' evaluations, and the bench end to end."""
import json
import math
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import bench_cipo  # noqa: E402


def arm(pass1, fix, brk):
    return {"pass1": pass1, "correction": {"correct/round1/fix_rate": fix, "correct/round1/break_rate": brk},
            "resample": {"fix": 0.3, "break": 0.2}}


def test_resample_reference_by_hand():
    """Two wrong attempts whose questions a fresh sample gets right 3 / 4 and 1 / 4 of the time, one right attempt
    whose question it gets wrong 1 / 4 of the time."""
    samples = [[1, 1, 1, 0], [0, 0, 1, 0], [1, 1, 0, 1]]
    r = bench_cipo.resample_reference([False, False, True], samples)
    assert r["fix"] == pytest.approx(0.5) and r["break"] == pytest.approx(0.25)
    assert math.isnan(bench_cipo.resample_reference([True] * 3, samples)["fix"])
    with pytest.raises(ValueError, match="2 attempts for 3 questions"):
        bench_cipo.resample_reference([True, False], samples)


def test_checks_compare_cipo_with_grpo():
    c = bench_cipo.checks(arm(0.40, 0.05, 0.30), arm(0.39, 0.20, 0.10))
    assert c["fixes_more"] and c["breaks_no_more"] and c["pass1_within_2"]
    assert c["cipo_fix"] == 0.20 and c["grpo_break"] == 0.30
    # a CIPO model that fixes less, breaks more, or forgets how to solve fails each check
    c = bench_cipo.checks(arm(0.40, 0.30, 0.10), arm(0.37, 0.20, 0.20))
    assert not (c["fixes_more"] or c["breaks_no_more"] or c["pass1_within_2"])
    # no attempt of a kind (nan rate) counts as nothing fixed / broken, not as a comparison with nan
    c = bench_cipo.checks(arm(0.4, math.nan, 0.1), arm(0.4, 0.1, math.nan))
    assert c["fixes_more"] and c["breaks_no_more"]


@pytest.mark.slow
def test_paired_intervals_compare_fix_and_break_rates_on_the_same_questions():
    """60 questions, both arms' attempts right on the first 30. GRPO's correction fixes 3 wrong ones and breaks 10
    right ones; CIPO's fixes 15 and breaks none: +40 points of fixes, -33.3 of breaks, +36.7 of round-1 accuracy,
    each interval on its side of zero."""
    import numpy as np

    def correction(fixed, broken):
        c = np.zeros((2, 60), int)
        c[0, :30] = 1
        c[1, broken:30 + fixed] = 1
        return {"correction": {"correct": c.tolist()}}

    d = bench_cipo.paired(correction(3, 10), correction(15, 0), draws=500)
    assert d["questions"] == 60
    assert d["fix"]["diff"] == pytest.approx(0.4) and d["fix"]["95"][0] > 0
    assert d["break"]["diff"] == pytest.approx(-1 / 3) and d["break"]["95"][1] < 0
    assert d["acc"]["diff"] == pytest.approx(22 / 60) and d["acc"]["95"][0] > 0
    with pytest.raises(ValueError, match="evaluated on 60 and 2 questions"):
        bench_cipo.paired(correction(3, 10), {"correction": {"correct": [[1, 0], [1, 1]]}})


def test_pooled_interval_is_the_mean_of_the_seeds_differences():
    """Seed 0: CIPO fixes 15 of 30 wrong attempts against GRPO's 3 (+40 points); seed 1: both fix 3 (0 points).
    The mean over seeds is +20 points, its interval narrower than seed 0's alone; a seed whose arms' attempts are
    all right (no fix rate) is left out of the fix mean but not of the break or accuracy means."""
    import numpy as np

    def correction(fixed, broken, right=30, n=60):
        c = np.zeros((2, n), int)
        c[0, :right] = 1
        c[1, broken:right + fixed] = 1
        return {"correction": {"correct": c.tolist()}}

    seed0 = {"grpo": correction(3, 10), "cipo": correction(15, 0)}
    seed1 = {"grpo": correction(3, 0), "cipo": correction(3, 0)}
    one = bench_cipo.paired(seed0["grpo"], seed0["cipo"], draws=500)
    both = bench_cipo.pooled({0: seed0, 1: seed1}, draws=500)
    assert both["seeds"] == 2 and both["questions"] == 120
    assert both["fix"]["diff"] == pytest.approx(0.2) and both["break"]["diff"] == pytest.approx(-1 / 6)
    assert both["fix"]["95"][0] > 0 and both["fix"]["95"][1] - both["fix"]["95"][0] < one["fix"]["95"][1] - \
        one["fix"]["95"][0]
    all_right = {"grpo": correction(0, 6, right=60), "cipo": correction(0, 0, right=60)}
    d = bench_cipo.pooled({0: seed0, 2: all_right}, draws=200)
    assert d["fix"]["diff"] == pytest.approx(0.4) and d["break"]["diff"] == pytest.approx((-1 / 3 - 0.1) / 2)
    # one seed pooled is the per-seed interval, draw for draw
    assert bench_cipo.pooled({0: seed0}, draws=500)["fix"] == one["fix"]


def test_bench_cipo_end_to_end_on_a_tiny_testbed(tmp_path):
    """Both arms train from one warm-up, are evaluated with correction rounds, and the table, summary and rho
    plot are written; CIPO's rho is logged every step; a `--config.` override reaches both arms."""
    path = tmp_path / "cipo_tiny.py"
    path.write_text(
        "from jaxrl_reason.configs.testbed_latin_cipo import get_config as preset\n\n\n"
        "def get_config():\n"
        "    c = preset()\n"
        "    c.data.train_size, c.data.heldout_size = 120, 8\n"
        "    c.model.hidden_size, c.model.num_hidden_layers, c.model.intermediate_size = 32, 2, 64\n"
        "    c.tokenizer.vocab_size = 300\n"
        "    c.sft.steps, c.sft.examples, c.sft.batch_size = 3, 40, 4\n"
        "    c.rl.steps, c.rl.prompts_per_step, c.rl.samples_per_prompt = 2, 2, 2\n"
        "    c.method.extra.correction_samples = 2\n"
        "    return c\n")
    per_seed = bench_cipo.main(["--config", str(path), "--workdir", str(tmp_path / "bench"), "--seeds", "0",
                                "--questions", "4", "--n", "2", "--rounds", "1", "--no-progress",
                                "--config.rl.steps=3"])
    ev = per_seed[0]["evals"]
    for a in bench_cipo.ARMS:
        c = ev[a]["correction"]
        assert 0.0 <= ev[a]["pass1"] <= 1.0 and 0.0 <= c["correct/round1/accuracy"] <= 1.0
        assert c["correct/round1/tokens_per_example"] > 0
        assert set(ev[a]["resample"]) == {"fix", "break"}
    root = tmp_path / "bench"
    summary = (root / "summary.md").read_text()
    assert summary.count("| 0 |") == 2 and "resample" in summary and (root / "rho.png").stat().st_size > 0
    rhos = [json.loads(line) for line in (root / "seed0" / "cipo" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert sum("cipo/rho" in r for r in rhos) == 3
    assert json.loads((root / "seed0" / "grpo" / "results.json").read_text())["rl_steps"] == 3
    assert per_seed[0]["paired"]["questions"] == 4 and "- seed 0: fix " in (root / "summary.md").read_text()
    assert json.loads((root / "summary.json").read_text())["mean_over_seeds"]["seeds"] == 1
    assert json.loads((root / "summary.json").read_text())["args"]["overrides"] == ["--config.rl.steps=3"]
    with pytest.raises(SystemExit):  # anything that is neither a flag nor a config knob is refused
        bench_cipo.main(["--config", str(path), "--workdir", str(root), "--config.rl.steps=3", "--rl_steps=3"])


def test_own_vs_injected_distance_and_summary():
    sys.path.insert(0, RESEARCH)
    import own_vs_injected as ovi

    assert ovi.positions_off(list("ABCD"), list("ABDC")) == 2
    assert ovi.positions_off(list("ABCD"), list("AB")) == 2  # two positions missing
    assert ovi.positions_off(list("ABCD"), None) == -1 and ovi.positions_off(list("ABCD"), []) == -1
    assert ovi.describe([1, 2, 2, 3, -1]) == "median 2 (1.75-2.25), range 1-3"
    assert ovi.describe([-1]) == "none"


def test_own_vs_injected_reads_a_worked_check_correction():
    """check_reading: a correction whose check is the task's and flags the fault, then a rewritten grid; one that
    copies the attempt right but marks every line ok and returns the attempt; reading_row counts them."""
    sys.path.insert(0, RESEARCH)
    import own_vs_injected as ovi
    from jaxrl_reason.data.latin_square import latin_square_examples
    from jaxrl_reason.data.testbed import correction_target, task_of

    task = task_of("latin_square")
    e, other = latin_square_examples(2, seed=3)
    wrong = other.solution  # the other question's grid: its givens changed here
    true_check = task.check_text(e.question, task.parse(wrong))
    assert any(line.rpartition(" ")[2] != "ok" for line in true_check.split("\n"))
    good = correction_target(task, e.question, task.parse(wrong), e.solution, "worked_check")
    assert ovi.check_reading(task, e.question, wrong, good) == ("exact", True, True)
    blind = "\n".join(line.rpartition(" ")[0] + " ok" for line in true_check.split("\n")) + "\n" + wrong
    assert ovi.check_reading(task, e.question, wrong, blind) == ("mark", False, False)
    row = ovi.reading_row("own", [("exact", True, True), ("mark", False, False)], [True, False])
    assert row == "| own | 2 | exact 1 · lines 0 · copy 0 · mark 1 | 1 | 1 | 1 | 1 |"
