"""experiments/bench/accelerator.py on CPU: the tiny shape end to end as a user runs it, and its arithmetic by
hand (the shapes are `experiment.perf`'s, the peaks `parallel.roofline`'s)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    from jaxrl_reason.experiment.perf import model_config
    from jaxrl_reason.parallel.roofline import peak_for

    def main(argv):
        env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
        done = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench" / "accelerator.py"), *argv], env=env,
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode in (0, 1), done.stderr[-3000:]
        return done.returncode

    return types.SimpleNamespace(model_config=model_config, peak_for=peak_for, main=main)


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_qwen_shapes_match_the_releases_and_the_memory_planner(bench):
    # Parameter counts of the Qwen2.5-0.5B / -1.5B checkpoints (tied embeddings, q/k/v biases).
    assert bench.model_config("0.5b", "bfloat16", "bfloat16").num_params() == 494_032_768
    cfg = bench.model_config("1.5b", "bfloat16", "bfloat16")
    assert cfg.num_params() == 1_543_714_304
    from jaxrl_reason.models.presets import PRESETS  # what experiments/plan_memory.py plans with

    preset = PRESETS["qwen2.5-math-1.5b"]
    for field in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "tie_word_embeddings"):
        assert getattr(cfg, field) == preset[field], field


def test_peak_table_lookup(bench):
    assert bench.peak_for("NVIDIA H100 80GB HBM3")[1:] == (3350.0, 989.0)
    assert bench.peak_for("NVIDIA H200")[1:] == (4800.0, 989.0)
    assert bench.peak_for("NVIDIA A100-SXM4-80GB")[1:] == (2039.0, 312.0)
    assert bench.peak_for("TPU v5 lite")[1:] == (819.0, 197.0)
    assert bench.peak_for("TPU v5p")[1:] == (2765.0, 459.0)
    assert bench.peak_for("cpu") is None


@pytest.mark.slow  # 69 s a call on 2 shared cores (2026-12-07)
def test_tiny_cpu_run(bench, tmp_path):
    out = tmp_path / "bench"
    hbm, tflops = 20.0, 0.2  # made-up peaks, so the ratios are computed (and checkable) on CPU
    rc = bench.main(["--shapes", "tiny", "--batches", "1,4", "--out", str(out), "--repeats", "2",
                     "--grpo-steps", "2", "--peak-hbm-gbs", str(hbm), "--peak-tflops", str(tflops),
                     "--compile-cache", ""])
    assert rc == 0
    res = json.loads((out / "accelerator.json").read_text())
    table = (out / "accelerator.md").read_text()
    assert res["errors"] == [] and res["skipped"] == []
    assert res["meta"]["peak"] == dict(hbm_gbs=hbm, tflops=tflops, source="--peak-hbm-gbs, --peak-tflops", note="")

    # tiny: vocab 512, hidden 64, 2 layers, 4 heads of 16 (2 kv heads), FFN 128, tied, float32 on CPU
    L, kvh, hd, h, v, ffn, nq = 2, 2, 16, 64, 512, 128, 4
    n_params = v * h + L * (h * hd * (nq + 2 * kvh) + nq * hd * h + hd * (nq + 2 * kvh) + 3 * h * ffn + 2 * h) + h
    assert [r["batch"] for r in res["decode"]] == [1, 4]
    for r in res["decode"]:
        b, p, n = r["batch"], 16, 16
        assert (r["prompt_len"], r["new_tokens"]) == (p, n)
        assert r["decode_tokens"] == b * n
        for k in ("decode_s", "prefill_s", "tokens_per_s", "ms_per_step", "bytes_per_step", "roofline_tokens_per_s",
                  "roofline_fraction", "achieved_gbs", "sample_call_tokens_per_s"):
            assert _finite_positive(r[k]), (k, r[k])
        assert r["tokens_per_s"] == pytest.approx(b * n / r["decode_s"])
        assert r["param_bytes"] == 4 * n_params
        kv = 2 * L * kvh * hd * (p + (n + 1) / 2) * b * 4
        assert r["bytes_per_step"] == pytest.approx(4 * n_params + kv)
        assert r["roofline_tokens_per_s"] == pytest.approx(b / ((4 * n_params + kv) / (hbm * 1e9)))
        assert r["roofline_fraction"] == pytest.approx(r["tokens_per_s"] / r["roofline_tokens_per_s"])

    (g,) = res["grpo"]
    # 2 prompts x 4 samples, 16 prompt + 16 completion tokens; each prompt through the model once
    P, G, lp, lc = 2, 4, 16, 16
    assert (g["prompts"], g["samples"], g["prompt_len"], g["completion_len"], g["shared_prompts"]) == (P, G, lp, lc,
                                                                                                       True)
    tokens = P * lp + P * G * lc  # 160
    attended = P * lp * (lp + 1) // 2 + P * G * (lc * lp + lc * (lc + 1) // 2)  # 3408
    per_layer = h * hd * (nq + 2 * kvh) + nq * hd * h + 3 * h * ffn  # 36,864 matmul weights
    flops = 6 * L * per_layer * tokens + 6 * v * h * P * G * lc + 12 * L * nq * hd * attended
    assert (g["tokens_forwarded"], g["trained_tokens"], g["attended_pairs"]) == (tokens, P * G * lc, attended)
    assert g["model_flops"] == flops == 101_179_392
    for k in ("step_s", "achieved_tflops", "mfu", "trained_tokens_per_s"):
        assert _finite_positive(g[k]), (k, g[k])
    assert g["mfu"] == pytest.approx(flops / g["step_s"] / (tflops * 1e12))
    assert g["update_applied"] is True

    assert "| tiny | 4 | 16 | 16 |" in table and "| tiny | 2x4 | 16+16 |" in table
