"""experiments/research/bench_credit.py: the token budget a run spent, read back from its metrics."""
import json
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
os.environ.setdefault("JAXRL_REASON_NO_REEXEC", "1")
import bench_credit  # noqa: E402


def test_token_curve_counts_rollouts_and_vine_continuations(tmp_path):
    (tmp_path / "logs").mkdir()
    records = [{"step": 1, "length/mean": 10.0, "vine/extra_tokens": 500.0},
               {"step": 2, "length/mean": 20.0, "vine/extra_tokens": 100.0},
               {"step": 2, "eval/accuracy": 0.6},
               {"step": 3, "length/mean": 5.0}]
    (tmp_path / "logs" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "results.json").write_text(json.dumps({"rollouts_per_step": 8, "before": {"accuracy": 0.5},
                                                       "after": {"accuracy": 0.7}}))
    c = bench_credit.token_curve(str(tmp_path))
    # 80 + 500, then 160 + 100 (evaluated there), then 40 more to the final checkpoint
    assert c["x"] == pytest.approx([0, 840, 880]) and c["y"] == [0.5, 0.6, 0.7]
    assert c["steps"] == 3 and c["total_tokens"] == pytest.approx(880)
