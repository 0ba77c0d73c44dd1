"""experiments/research/smollm2_critique.py: the critique + guided re-solve round on the real SmolLM2 GGUF."""
import json
import os
import sys

import pytest

RESEARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "research")
sys.path.insert(0, RESEARCH)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smollm2_critique  # noqa: E402
from gguf_fixtures import smollm2_gguf_path  # noqa: E402


@pytest.mark.parametrize("hint,leaks", [
    ("The sum of 57 and 27 is 84, so check the carry.", True),
    ("Add the tens and the units separately, then carry.", False),
    ("Recheck: 184 is too large.", False),  # 84 inside a longer number is not the answer written out
    ("84.", True),
    ("", False),
])
def test_hint_leaks_answer(hint, leaks):
    assert smollm2_critique.hint_leaks_answer(hint, "84") is leaks


@pytest.mark.slow
def test_the_round_runs_on_the_real_model(tmp_path):
    path = smollm2_gguf_path()
    res = smollm2_critique.main(["--gguf", str(path), "--questions", "2", "--batch-size", "2", "--max-new-tokens",
                                 "8", "--critique-max-new-tokens", "24", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["questions"] == 2 and saved["critiques"]["well_formed"]["of"] == 2
    wrong = round(2 * (1 - saved["attempt_accuracy"]))
    assert saved["guided"]["fixes_wrong"]["of"] == wrong == saved["unguided"]["fixes_wrong"]["of"]
    rows = [json.loads(line) for line in (tmp_path / "critiques.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all({"critique", "hint", "guided", "unguided"} <= set(r) for r in rows)
    assert "| guided by the critique's hint |" in (tmp_path / "results.md").read_text()
    assert res == saved
