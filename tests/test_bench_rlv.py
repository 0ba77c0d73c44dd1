"""experiments/research/bench_rlv.py: which arm each of issue #4's checks compares against, and the three arms'
training."""
import json
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import bench_rlv  # noqa: E402
from jaxrl_reason.experiment.warmup import SFT_ONLY  # noqa: E402


def fake_eval(pass1, maj, bon, weighted, bal=0.8, chance=0.6):
    ks = [1, 2, 4]
    curve = lambda first, last: {"mean": [first, (first + last) / 2, last], "std": [0.0] * 3}  # noqa: E731
    return {"ks": ks, "strategies": {"pass": curve(pass1, 0.99), "majority": curve(pass1, maj),
                                     "best_of_n": curve(pass1, bon), "weighted": curve(pass1, weighted)},
            "verifier": {"self": {"balanced_accuracy": bal, "auroc": 0.9, "within_question_auroc": 0.6}},
            "vote_headroom": {"self": {"questions": 4, "majority_wrong": 1.5, "solvable": 1, "rescued": 0.0,
                                       "broken": 0.5, "top_wrong_share": 0.75, "right_share": 0.25,
                                       "needed_ratio": 3.0, "score_ratio": 1.1}},
            "best_of_n_chance": {"accuracy": chance}}


def test_checks_use_the_never_verify_trained_grpo_as_the_issues_baseline():
    plain = fake_eval(pass1=0.80, maj=0.85, bon=0.70, weighted=0.84, bal=0.5)
    control = fake_eval(pass1=0.90, maj=0.92, bon=0.88, weighted=0.91)
    rlv = fake_eval(pass1=0.87, maj=0.91, bon=0.85, weighted=0.93, bal=0.74, chance=0.86)
    checks = bench_rlv.issue_checks(plain, control, rlv, 4)
    assert [c["issue"] for c in checks] == [True, True, True, True, True, False, False, False]
    bal, within, weighted, bon, pass1, bon_control, pass1_control, reads = checks
    assert (within["measured"], within["met"]) == (0.6, False)  # pooled and within a question: both asked for
    # Beating the judge is not reading: BoN 0.85 is below what random scores per distinct completion give.
    assert (reads["measured"], reads["against"], reads["met"]) == (0.85, 0.86, False)
    assert (bal["measured"], bal["met"]) == (0.74, False)
    assert (weighted["measured"], weighted["against"], weighted["met"]) == (0.93, 0.91, True)
    # Check 3 against the plain GRPO's judge (0.70), not the control's warm-up verifier (0.88).
    assert (bon["against"], bon["met"]) == (0.70, True) and (bon_control["against"], bon_control["met"]) == (0.88, False)
    assert pass1["met"] and pass1["against"] == pytest.approx(0.78)
    assert not pass1_control["met"] and pass1_control["against"] == pytest.approx(0.88)
    rloo_v = fake_eval(pass1=0.80, maj=0.82, bon=0.83, weighted=0.84)
    table = bench_rlv.results_table({"grpo_plain": plain, "grpo": control, "rlv": rlv, "rloo_v": rloo_v}, checks, 4)
    assert "never trained to verify" in table and table.count("(not an issue check)") == 3
    assert "| 87.0 | 91.0 | 85.0 | 86.0 | 93.0 | 99.0 |" in table
    assert table.count("| 1.5 of 4 | 1 | 75.0 | 25.0 | 3.00 | 1.10 | 0.0 | 0.5 |") == 4
    # Samples weighted voting needs to reach plain GRPO's maj@4 (0.85): GRPO^V's weighted is 0.87 already at k = 1;
    # RLOO^V's (0.80, 0.82, 0.84 at k = 1, 2, 4) never does. Reaching 0.83 first at k = 4, with k = 3 not
    # evaluated, makes 4 a bound; 0.81 at k = 2 is exact (k = 1 was evaluated).
    assert "| GRPO^V | 1 |" in table and "| RLOO^V | > 4 |" in table
    assert bench_rlv.samples_to_match(rloo_v, 0.83) == {"k": 4, "exact": False, "weighted": 0.84, "target": 0.83}
    assert bench_rlv.samples_to_match(rloo_v, 0.81) == {"k": 2, "exact": True, "weighted": pytest.approx(0.82),
                                                        "target": 0.81}
    assert "| <= 4 |" in bench_rlv.results_table({"grpo_plain": fake_eval(0.5, 0.83, 0.5, 0.5), "grpo": control,
                                                  "rlv": rlv, "rloo_v": rloo_v}, checks, 4)


def fake_summary(seed, rlv, plain, control):
    return {"n": 4, "seed": seed, "checks": bench_rlv.issue_checks(plain, control, rlv, 4),
            "grpo_plain": plain, "grpo": control, "rlv": rlv, "rloo_v": rlv}


def test_medians_over_seeds_compare_the_median_values_and_refuse_mixed_benchmarks(tmp_path):
    """Three seeds: one verifier far above the bar, two just below it -> the median misses; weighted beats majority on
    two seeds of three -> the median meets it, and the per-seed values are in the table."""
    plain = fake_eval(pass1=0.50, maj=0.55, bon=0.40, weighted=0.52, bal=0.5)
    control = fake_eval(pass1=0.50, maj=0.55, bon=0.60, weighted=0.56)
    seeds = [fake_summary(0, fake_eval(0.50, 0.56, 0.80, 0.70, bal=0.95), plain, control),
             fake_summary(1, fake_eval(0.49, 0.55, 0.55, 0.56, bal=0.74), plain, control),
             fake_summary(2, fake_eval(0.47, 0.54, 0.45, 0.53, bal=0.70), plain, control)]
    out, table = bench_rlv.seed_medians(seeds)
    by = {c["check"]: c for c in out["checks"]}
    bal = by["GRPO^V verifier balanced accuracy >= 75%"]
    assert (bal["measured"], bal["met"]) == (0.74, False)
    weighted = by["GRPO^V weighted@4 > GRPO^V maj@4"]
    assert (weighted["measured"], weighted["against"], weighted["met"]) == (0.56, 0.55, True)
    assert weighted["difference"] == pytest.approx(0.01)
    bon = by["GRPO^V BoN@4 (self) > GRPO BoN@4 (LLM-as-a-judge)"]
    assert (bon["measured"], bon["against"], bon["met"]) == (0.55, 0.40, True)
    assert out["arms"]["rlv"]["pass@1"] == 0.49 and out["seeds"] == [0, 1, 2]
    assert "70.0 / 56.0, 56.0 / 55.0, 53.0 / 54.0" in table
    # a run with another N is another benchmark
    with pytest.raises(ValueError, match="differ in N"):
        bench_rlv.seed_medians(seeds[:2] + [{**seeds[2], "n": 16}])
    # the CLI: summaries read from workdirs, medians written beside
    for s in seeds:
        os.makedirs(tmp_path / f"s{s['seed']}")
        json.dump(s, open(tmp_path / f"s{s['seed']}" / "summary.json", "w"))
    res = bench_rlv.main(["--medians"] + [str(tmp_path / f"s{i}") for i in range(3)] + ["--workdir",
                                                                                      str(tmp_path / "med")])
    assert res["checks"] == out["checks"] and os.path.exists(tmp_path / "med" / "medians.md")
    with pytest.raises(SystemExit, match="no .*summary.json"):
        bench_rlv.main(["--medians", str(tmp_path / "missing"), "--workdir", str(tmp_path / "med")])


def test_the_summary_reports_each_runs_warm_up_verifier_and_greedy_accuracy(tmp_path):
    """The warm-up's verifier (every round of a check stage with a target) and each run's greedy accuracy before
    and after RL, from the runs' results.json; a run without one is left out."""
    check = {"before": {"balanced_acc": 0.47}, "after": {"balanced_acc": 0.91}, "after_rounds": [0.785, 0.91]}
    runs = {"grpo": {"before": {"accuracy": 0.516}, "after": {"accuracy": 0.52}, "check_warmup": check},
            "rlv": {"before": {"accuracy": 0.516}, "after": {"accuracy": 0.535}}}
    dirs = {}
    for arm in ("grpo", "rlv", "grpo_plain"):
        dirs[arm] = str(tmp_path / arm)
        os.makedirs(dirs[arm])
        if arm in runs:
            json.dump(runs[arm], open(os.path.join(dirs[arm], "results.json"), "w"))
    out, md = bench_rlv.warmup_report(dirs)
    assert set(out) == {"grpo", "rlv"} and out["grpo"]["check_warmup"]["after_rounds"] == [0.785, 0.91]
    assert "| grpo | 51.6 | 52.0 | 47.0 -> 78.5 -> 91.0 |" in md and "| rlv | 51.6 | 53.5 | – |" in md


def test_the_rloo_v_arm_is_the_rlv_config_with_the_leave_one_out_estimator():
    from jaxrl_reason.configs.testbed_latin_check import get_config
    from jaxrl_reason.experiment.pipeline import start

    cfg = get_config()
    bench_rlv.as_rloo_v(cfg)
    rc, method = start(cfg)
    assert (rc.method.name, rc.method.estimator, type(method).__name__) == ("rlv", "rloo", "RLV")
    assert rc.sft.check_steps == get_config().sft.check_steps  # the same warm-up as GRPO^V


TINY_CONFIG = """
from jaxrl_reason.configs.rlv import get_config as rlv_config


def get_config():
    c = rlv_config()
    c.data.train_size, c.data.heldout_size = 300, 8
    c.data.min_operands = c.data.max_operands = 2
    c.model.hidden_size, c.model.num_hidden_layers, c.model.intermediate_size = 32, 2, 64
    c.tokenizer.vocab_size = 300
    c.sft.steps, c.sft.examples, c.sft.batch_size = 3, 100, 8
    # Contrast pairs need no correct samples, which a 3-step model does not make.
    c.sft.verify_steps, c.sft.verify_questions, c.sft.verify_samples = 2, 20, 0
    c.sft.verify_contrast = "slips"
    c.rl.steps, c.rl.prompts_per_step, c.rl.samples_per_prompt, c.rl.max_new_tokens = 1, 4, 4, 24
    return c
"""


@pytest.mark.slow
def test_four_arms_share_what_they_should_and_only_grpo_plain_never_sees_the_verify_prompt(tmp_path):
    config = tmp_path / "tiny_rlv.py"
    config.write_text(TINY_CONFIG)
    work = tmp_path / "bench"
    summary = bench_rlv.main(["--workdir", str(work), "--grpo-config", str(config), "--rlv-config", str(config),
                              "--n", "2", "--questions", "4", "--no-progress"])
    assert set(bench_rlv.ARMS) <= set(summary) and len(summary["checks"]) == 8
    results = {arm: json.load(open(work / arm / "results.json")) for arm in bench_rlv.ARMS}
    assert "verify_warmup" in results["grpo"] and "verify_warmup" in results["rlv"]
    assert "verify_warmup" not in results["grpo_plain"] and not (work / "grpo_plain" / "logs_verify_warmup").exists()
    # GRPO^V starts from the control's warmed-up model; plain GRPO from the control's SFT alone (its verifier is
    # taught after the SFT, so the SFT is trained once), with the same tokenizer.
    read = lambda p: open(p, "rb").read()  # noqa: E731
    for arm in ("rlv", "rloo_v"):
        assert read(work / arm / "sft_model" / "model.safetensors") == read(work / "grpo" / "sft_model" / "model.safetensors")
        rows = [json.loads(x) for x in open(work / arm / "logs" / "metrics.jsonl")]
        assert "loss/verify" in rows[0] and "verify/rows" in rows[0]
    assert read(work / "grpo_plain" / "sft_model" / "model.safetensors") != read(
        work / "grpo" / "sft_model" / "model.safetensors")
    assert read(work / "grpo_plain" / "sft_model" / "model.safetensors") == read(
        work / "grpo" / SFT_ONLY / "model.safetensors")
    assert "sft_seconds" not in results["grpo_plain"]  # it trained no SFT of its own
    assert read(work / "grpo_plain" / "tokenizer" / "tokenizer.json") == read(work / "grpo" / "tokenizer" / "tokenizer.json")
    rows = [json.loads(x) for x in open(work / "grpo_plain" / "logs" / "metrics.jsonl")]
    assert "loss/verify" not in rows[0]
    assert (work / "accuracy_vs_k.png").exists() and "GRPO^V" in (work / "summary.md").read_text()
    assert set(summary["samples_to_match_plain_majority"]) == {"rlv", "rloo_v", "grpo"}
    # A second call finds every arm trained and evaluated: nothing is retrained, the numbers are the same.
    stamps = {arm: os.path.getmtime(work / arm / "results.json") for arm in bench_rlv.ARMS}
    again = bench_rlv.main(["--workdir", str(work), "--grpo-config", str(config), "--rlv-config", str(config),
                            "--n", "2", "--questions", "4", "--no-progress"])
    assert stamps == {arm: os.path.getmtime(work / arm / "results.json") for arm in bench_rlv.ARMS}
    assert again["checks"] == summary["checks"]
    # Another seed in the same workdir would evaluate this seed's models under its name: refused, naming the fix.
    with pytest.raises(SystemExit, match="--seed 0 to resume it, or a new --workdir"):
        bench_rlv.main(["--workdir", str(work), "--grpo-config", str(config), "--rlv-config", str(config),
                        "--n", "2", "--questions", "4", "--no-progress", "--seed", "3"])
