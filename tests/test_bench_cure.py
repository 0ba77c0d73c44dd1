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
