"""experiments/research/rl_headroom.py: the grid, the training-metric phases, and the sweep end to end."""
import json
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import rl_headroom  # noqa: E402


def test_grid_is_parsed_and_bad_specs_are_refused():
    grid = rl_headroom.parse_grid(["rl.lr=2e-5,1e-4", "rl.prompts_per_step=8"])
    assert grid == [("rl.lr", ["2e-5", "1e-4"]), ("rl.prompts_per_step", ["8"])]
    assert rl_headroom.point_name([("rl.lr", "1e-4"), ("rl.steps", "300")]) == "lr1e-4_steps300"
    for bad in ("lr=1e-4", "rl.lr", "rl.lr="):
        with pytest.raises(ValueError, match="SECTION.KNOB=V1,V2"):
            rl_headroom.parse_grid([bad])
    with pytest.raises(ValueError, match="only rl.. and method.. knobs"):
        rl_headroom.parse_grid(["sft.steps=10,20"])  # the warm-up is shared, so it cannot vary
    with pytest.raises(ValueError, match="twice"):
        rl_headroom.parse_grid(["rl.lr=1e-4", "rl.lr=1e-3"])


def test_phase_means_are_the_first_and_last_fifth_of_the_steps(tmp_path):
    (tmp_path / "logs").mkdir()
    rows = [{"step": s, "reward/mean": s / 10, "solve/entropy": 1.0 - s / 10} for s in range(1, 11)]
    rows.insert(3, {"step": 3, "eval/accuracy": 0.5})  # an evaluation record has no reward: skipped
    (tmp_path / "logs" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in reversed(rows)))
    m = rl_headroom.phase_means(str(tmp_path))
    assert m["reward/mean"] == pytest.approx([0.15, 0.95]) and m["solve/entropy"] == pytest.approx([0.85, 0.05])


@pytest.mark.slow
def test_every_grid_point_trains_from_the_same_warm_up_with_its_own_knob(tmp_path):
    """Two learning rates, the first point training the warm-up the second starts from: both start at the same
    greedy accuracy, the warm-up is scored once, and the knob reaches its run (step 2 sees the same samples under
    both, as the warm-up's first step has lr 0, so Adam's update norms differ by the ratio of the learning rates);
    a later sweep `--from` that run starts from its warm-up."""
    path = tmp_path / "tiny.py"
    path.write_text(
        "from jaxrl_reason.configs.testbed_latin import get_config as preset\n\n\n"
        "def get_config():\n"
        "    c = preset()\n"
        "    c.data.train_size, c.data.heldout_size = 120, 8\n"
        "    c.model.hidden_size, c.model.num_hidden_layers, c.model.intermediate_size = 32, 2, 64\n"
        "    c.tokenizer.vocab_size = 300\n"
        "    c.sft.steps, c.sft.examples, c.sft.batch_size, c.sft.verify_steps = 3, 40, 4, 0\n"
        "    c.rl.steps, c.rl.prompts_per_step, c.rl.samples_per_prompt, c.rl.warmup_steps = 1, 2, 2, 5\n"
        "    c.rl.eval_every, c.rl.progress = 0, False\n"
        "    c.method.name, c.method.extra = 'grpo', {}\n"
        "    return c\n")
    root = tmp_path / "sweep"
    rl_headroom.main(["--config", str(path), "--workdir", str(root), "--grid", "rl.lr=1e-4,1e-3", "--questions", "4",
                      "--n", "2", "--no-progress", "--config.rl.steps=2"])
    rows = json.loads((root / "summary.json").read_text())
    assert [r["point"] for r in rows] == [{"rl.lr": "1e-4"}, {"rl.lr": "1e-3"}]
    assert rows[0]["before_greedy"] == rows[1]["before_greedy"] and rows[0]["before_pass1"] == rows[1]["before_pass1"]
    assert all(0.0 <= r["after_pass1"] <= 1.0 for r in rows)
    warm_up_scores = [(root / name / "pass1_sft_model.json").exists() for name in ("lr1e-4", "lr1e-3")]
    assert warm_up_scores == [True, False]
    norms = []
    for name in ("lr1e-4", "lr1e-3"):
        records = [json.loads(x) for x in (root / name / "logs" / "metrics.jsonl").read_text().splitlines()]
        norms.append({r["step"]: r["update_norm"] for r in records if "update_norm" in r})
        assert json.loads((root / name / "results.json").read_text())["rl_steps"] == 2
    assert norms[1][2] == pytest.approx(10 * norms[0][2], rel=0.05)
    assert "| 1e-3 |" in (root / "summary.md").read_text()
    rl_headroom.main(["--config", str(path), "--from", str(root / "lr1e-4"), "--workdir", str(tmp_path / "again"),
                      "--grid", "rl.lr=3e-4", "--questions", "4", "--n", "2", "--no-progress", "--config.rl.steps=2"])
    again = json.loads((tmp_path / "again" / "summary.json").read_text())[0]
    assert again["before_greedy"] == rows[0]["before_greedy"] and again["before_pass1"] == rows[0]["before_pass1"]
    with pytest.raises(SystemExit):  # a source without a warm-up is refused before anything runs
        rl_headroom.main(["--config", str(path), "--from", str(tmp_path), "--workdir", str(root),
                          "--grid", "rl.lr=1e-4"])
