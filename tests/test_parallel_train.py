"""Sharding wired through the training loop: the Trainer on a mesh equals the unsharded Trainer step for step,
a checkpoint saved on (8, 1, 1) resumes on (2, 2, 2), and experiments/train.py trains end to end from
`config.parallel` — all on 8 fake CPU devices in one subprocess (tests/parallel_train_checks.py), which compiles
each program once for every test here."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from jaxrl_reason.configs import config_path, load_config_file
from jaxrl_reason.experiment.config import read_run_config
from jaxrl_reason.parallel import memory
from jaxrl_reason.parallel.mesh import resolve_mesh_shape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Hand-computed local shards of the tiny model (vocab 300, hidden 32, MLP 64, 2 layers, 4 q / 2 kv heads of 8).
SHARDS_222 = {"embed_tokens/weight": [300 // 2, 32 // 2], "layers/mlp/up_proj/kernel": [2, 32 // 2, 64 // 2],
              "layers/mlp/down_proj/kernel": [2, 64 // 2, 32 // 2], "layers/self_attn/k_proj/kernel": [2, 32 // 2, 16 // 2],
              "layers/self_attn/q_proj/bias": [2, 32 // 2], "layers/input_layernorm/weight": [2, 32]}


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel_train") / "results.json"
    from processes import cpu_devices_env

    env = cpu_devices_env(8)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "parallel_train_checks.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def assert_same_metrics(got, want):
    for k, v in want.items():
        # loss/pg is a zero-mean sum at ratio 1 (group-centred advantages): compare it on the scale of its terms
        assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-7), (k, got[k], v)


@pytest.mark.slow
def test_trainer_on_meshes_matches_the_unsharded_trainer(eight):
    t = eight["trainer"]
    assert len(t["ref"]) == 3 and len(t["a"]) == 1 and len(t["b"]) == 2
    for got, want in zip(t["a"] + t["b"], t["ref"]):
        # identical samples: the random draws and the rewards do not depend on the layout
        assert got["reward/mean"] == want["reward/mean"] and got["solve/tokens"] == want["solve/tokens"]
        assert_same_metrics(got, want)
    # not vacuous: the steps differ, the rewards carry signal, the reference moved off the initial params
    assert 0 < t["ref"][0]["reward/mean"] < 1 and t["ref"][0]["grad_norm"] > 0.01
    assert t["ref"][0]["grad_norm"] != t["ref"][1]["grad_norm"] and t["ref"][1]["loss/kl"] > 0
    assert t["param_max_diff"] < 1e-5 < 1e-3 < t["param_moved"]


@pytest.mark.slow
def test_trainer_state_is_sharded_by_the_rules(eight):
    t = eight["trainer"]
    for tree in (t["b_layout"], t["restored"]["layout"], t["model_layout"]):
        for path, shard in SHARDS_222.items():
            assert tree[path]["shard"] == shard, path
            assert tree[path]["mesh"] == {"data": 2, "fsdp": 2, "tp": 2}
    assert t["restored"]["opt_layout"]["1/0/mu/layers/mlp/gate_proj/kernel"]["shard"] == [2, 16, 32]
    assert t["a_layout"]["layers/mlp/up_proj/kernel"]["shard"] == [2, 32, 64]  # (8, 1, 1): replicated params
    for leaf in t["restored"]["step_key_layout"].values():  # one copy on every device: saved once, read anywhere
        assert leaf["spec"] == [] and leaf["mesh"] == {"data": 2, "fsdp": 2, "tp": 2}


@pytest.mark.slow
def test_checkpoint_saved_on_8x1x1_resumes_on_2x2x2(eight):
    t = eight["trainer"]
    r = t["restored"]
    assert r["step"] == 1 and r["param_max_diff"] == 0.0
    assert_same_metrics(t["b"][0], t["ref"][1])  # the next step after the restore is the reference's step 2
    assert t["logged_steps"] == [1, 2, 3]  # one metrics file across both meshes, no step repeated


@pytest.mark.slow
def test_train_script_runs_from_config_parallel(eight):
    s = eight["train_script"]
    assert s["results_mesh"] == s["trainer_mesh"] == {"data": 2, "fsdp": 2, "tp": 2}
    assert s["layout"]["layers/mlp/up_proj/kernel"]["shard"] == [2, 16, 32]
    assert s["logged_steps"] == [1, 2] and s["sft_steps"] == [1, 2, 3]
    assert s["sft_nll"][2] < s["sft_nll"][0] - 0.1  # the sharded SFT warm-up trains
    for phase in ("before", "after"):
        assert s["results"][phase]["num_examples"] == 8 and 0 <= s["results"][phase]["accuracy"] <= 1
    assert s["final_hidden"] == 32 and s["final_layers"] == 2  # the HF checkpoint written from sharded params


@pytest.mark.slow
def test_sampler_under_a_mesh_pads_rows_and_pins_the_kv_cache(eight):
    s = eight["sampler"]
    assert len(s["reference"]) == 6 and len({tuple(r) for r in s["reference"]}) == 3  # 3 prompts x 2 samples
    assert s["mesh_8"] == s["reference"] and s["lengths"][0] == s["lengths"][1]  # filler rows dropped
    assert s["logprob_max_diff"] < 1e-5
    # k is [rows, kv heads, head dim, slots]: 4 prompts x 2 samples over data x fsdp = 4, 2 kv heads over tp = 2
    assert s["k_spec"] == ["('data', 'fsdp')", "tp"] and s["valid_spec"] == ["('data', 'fsdp')"]
    assert s["k_shape"] == [8, 2, 8, 16] and s["k_shard"] == [8 // 4, 2 // 2, 8, 16]


def test_single_device_config_runs_on_the_one_device_mesh():
    """tiny_default's parallel section (all axes 1) is the one-device mesh, the same sharded path as any other."""
    from jaxrl_reason.configs.tiny_default import get_config as tiny_default
    from jaxrl_reason.experiment.model import build_mesh
    from jaxrl_reason.parallel.mesh import one_device_mesh

    cfg = tiny_default()
    mesh_of = lambda c: build_mesh(read_run_config(c).parallel)  # noqa: E731
    assert dict(cfg.parallel.mesh_shape) == {"data": 1, "fsdp": 1, "tp": 1}
    assert mesh_of(cfg) is one_device_mesh() and one_device_mesh().size == 1
    cfg.parallel.mesh_shape = {"data": 1, "fsdp": -1, "tp": 1}  # "all devices" on a one-device host
    assert mesh_of(cfg) is one_device_mesh()
    cfg.parallel.mesh_shape = {"data": 1, "fsdp": 4, "tp": 1}
    with pytest.raises(ValueError, match="covers 4 devices but 1 are available"):
        mesh_of(cfg)


def test_cure_7b_config_fits_four_80gb_gpus_and_builds_cure():
    """The launch config's mesh and batch, planned for 4 devices, fit 80 GB each, and its method section builds
    the CURE method with its three tasks."""
    from jaxrl_reason.models.presets import load_model_config

    c = load_config_file(config_path("cure_qwen25_7b_4gpu"))
    assert c.method.name == "cure" and c.model.dtype == "bfloat16"
    mesh = dict(zip(("data", "fsdp", "tp"), resolve_mesh_shape(c.parallel.mesh_shape.to_dict(), 4)))
    cfg = load_model_config("qwen2.5-7b-instruct", c.model.dtype, c.model.compute_dtype or c.model.dtype)
    p = c.parallel.plan
    batch = memory.BatchSettings(train_rows=p.train_rows, train_length=p.context, sample_rows=p.sample_rows,
                                 sample_length=p.context, micro_batches=c.rl.micro_batches,
                                 logprob_chunk=c.rl.logprob_chunk)
    plan = memory.plan(cfg, mesh, batch)
    assert plan.fits(c.parallel.device_memory_gb * memory.GiB), plan.table(c.parallel.device_memory_gb * memory.GiB)
    # the largest CURE batch the config can build fits in the planned rows
    q, k = c.rl.prompts_per_step, c.rl.samples_per_prompt
    m = c.method.extra.guided_samples
    assert p.train_rows >= q * k + q * k + (q * k // 2) * m  # solve (with replay) + critiques + guided solutions
    assert p.sample_rows >= max(q * k, (q * k // 2) * m)
    assert p.prompt_tokens + c.rl.max_new_tokens <= p.context  # solve
    # critique: problem + solution + template (<= 128 tokens) + the critique itself
    assert p.prompt_tokens + c.rl.max_new_tokens + 128 + c.method.extra.critique_max_new_tokens <= p.context
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.methods.cure import CURE

    method = make_method(c.method)
    assert isinstance(method, CURE) and [t.name for t in method.terms()] == ["pg", "critique", "guided_solve"]
    assert method.guided_samples == m
    tc = read_run_config(c).rl
    assert tc.micro_batches == c.rl.micro_batches and tc.logprob_chunk == c.rl.logprob_chunk


def test_preflight_plans_a_config_and_run_sh_stops_when_it_does_not_fit(tmp_path):
    """experiments/launch: the plan of a config's own mesh and batch, and a launch that refuses to start when
    PREFLIGHT=1 finds it does not fit (before any model is loaded)."""
    from jaxrl_reason.configs import load_config_file
    from jaxrl_reason.experiment.compile_check import batch_settings

    cfg_path = os.path.join(ROOT, "jaxrl_reason", "configs", "cure_qwen25_7b_4gpu.py")
    preflight = [sys.executable, os.path.join(ROOT, "experiments", "launch", "preflight.py"), "--config", cfg_path,
                 "--devices", "4"]
    run = lambda *extra: subprocess.run(preflight + list(extra), capture_output=True, text=True, timeout=300,  # noqa
                                        env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
    fits, tight = run(), run("--config.parallel.device_memory_gb=24")
    assert fits.returncode == 0 and tight.returncode == 3, (fits.stderr[-2000:], tight.stderr[-2000:])
    assert f"compile_tpu.py --config {cfg_path} --topology" in fits.stdout  # where the compiler's own count is
    # the trainer pads each update to whole micro-batches per batch shard: the plan counts those rows
    c = load_config_file(os.path.join(ROOT, "jaxrl_reason", "configs", "rlv_qwen25_math_1p5b_8gpu.py"),
                         ["--config.rl.micro_batches=3"])
    b = batch_settings(c, 8)
    assert b.train_rows == 336 and b.sample_rows == 160 and b.train_length == 768 + 256  # 2 x 160 -> 14 x 24
    env = dict(os.environ, PREFLIGHT="1", PREFLIGHT_DEVICES="4", PYTHON=sys.executable)
    out = subprocess.run([os.path.join(ROOT, "experiments", "launch", "run.sh"), cfg_path,
                          "--config.parallel.device_memory_gb=24"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 3 and "DOES NOT FIT in 24.0 GiB" in out.stdout, out.stderr[-2000:]
    missing = subprocess.run([os.path.join(ROOT, "experiments", "launch", "run.sh"), "no/such/config.py"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no config file" in missing.stderr


@pytest.mark.slow
def test_trainer_in_two_processes_matches_one_process(tmp_path):
    """Two processes joined by jax.distributed train on one global mesh: each grades only its half of the
    completions, only process 0 writes metrics, and every step equals one process holding all 4 devices."""
    from tiny import arith_tokenizer

    tok = tmp_path / "tok"
    arith_tokenizer(tok)
    from processes import run_two_and_one

    multi, single = tmp_path / "multi", tmp_path / "single"
    multi.mkdir(), single.mkdir()
    run_two_and_one(os.path.join(HERE, "parallel_train_multiprocess.py"), [tok, multi], [tok, single], timeout=900)
    m, s = (json.loads((d / "result.json").read_text()) for d in (multi, single))
    assert m["process_count"] == 2 and s["process_count"] == 1 and m["device_count"] == s["device_count"] == 4
    # 4 prompts x 2 samples per step: each process graded its own half
    assert json.loads((multi / "scored_0.json").read_text())["scored"] == [4, 4]
    assert json.loads((multi / "scored_1.json").read_text())["scored"] == [4, 4]
    assert json.loads((single / "scored_0.json").read_text())["scored"] == [8, 8]
    logged = [json.loads(x)["step"] for x in open(multi / "run" / "logs" / "metrics.jsonl")]
    assert logged == [1, 2]  # process 0 alone wrote them
    assert len(m["history"]) == 2 and m["history"][0]["grad_norm"] != m["history"][1]["grad_norm"]
    for a, b in zip(m["history"], s["history"]):
        assert a["reward/mean"] == b["reward/mean"] and a["solve/tokens"] == b["solve/tokens"]
        assert_same_metrics(a, b)
    pm, ps = np.load(multi / "params.npz"), np.load(single / "params.npz")
    assert sorted(pm.files) == sorted(ps.files)
    for k in pm.files:
        np.testing.assert_allclose(pm[k], ps[k], atol=1e-6)


@pytest.mark.slow
def test_verification_warmup_trains_on_a_mesh_as_on_one_device(eight):
    v = eight["verify_warmup"]
    assert len(v["ref"]) == len(v["mesh"]) == 3
    for got, want in zip(v["mesh"], v["ref"]):
        assert got == pytest.approx(want, rel=1e-5)
    assert v["ref"][2][0] != v["ref"][0][0]  # not vacuous: the loss moved
    assert v["mesh_layout"]["layers/mlp/up_proj/kernel"]["shard"] == SHARDS_222["layers/mlp/up_proj/kernel"]
    assert v["ref_layout"]["layers/mlp/up_proj/kernel"]["mesh"] == {"data": 1, "fsdp": 1, "tp": 1}
