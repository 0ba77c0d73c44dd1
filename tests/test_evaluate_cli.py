"""experiments/evaluate.py as a user runs it: flags -> EvalSpec -> outputs (the library it reads them into is
tested in tests/test_evaluation.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from test_evaluation import tiny_checkpoint  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "evaluate.py"), *argv], env=env,
                          capture_output=True, text=True, timeout=900)


def test_cli_writes_the_four_outputs_and_refuses_a_bad_flag_by_name(tiny_checkpoint, tmp_path):  # noqa: F811
    model_dir, out = str(tiny_checkpoint / "model"), tmp_path / "eval"
    done = run_cli("--model", model_dir, "--data", str(tiny_checkpoint / "data.jsonl"), "--n", "2", "--ks", "1,2",
                   "--max-new-tokens", "6", "--num-subsets", "10", "--no-progress", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("results.json", "results.md", "accuracy_vs_k.png", "samples.jsonl"):
        assert (out / name).stat().st_size > 0, name
    saved = json.loads((out / "results.json").read_text())
    assert saved["ks"] == [1, 2] and saved["num_questions"] == 3
    assert saved["config"]["model"] == model_dir and saved["config"]["grader"] == "math"
    assert "| maj@k |" in done.stdout
    for argv, message in ((["--length-budgets", "8,4"], "--length-budgets must be strictly increasing"),
                          (["--correction-rounds", "-1"], "--correction-rounds must be >= 0"),
                          ([], "give --data")):
        data = [] if not argv else ["--data", str(tiny_checkpoint / "data.jsonl")]
        bad = run_cli("--model", model_dir, *data, *argv, "--out", str(tmp_path / "bad"))
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr[-2000:]
