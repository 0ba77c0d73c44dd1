"""experiment.compile_check / experiments/launch/compile_tpu.py (run as a user runs it): the tiny preset's update and
rollout decode compiled for a v5e:2x2 topology on a 2-device mesh with libtpu (no TPU), the compiler's memory report and the fit verdict,
an impossible HBM size, the settings refused before compiling, and the analytic FLOPs against the compiler's on
an unrolled forward."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxrl_reason.configs import load_config_file
from jaxrl_reason.experiment import compile_check as cc
from jaxrl_reason.experiment.config import read_run_config

needs_libtpu = pytest.mark.skipif(not cc.libtpu_available(),
                                  reason='libtpu is not installed (pip install "jax[tpu]==<jax version>")')

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "jaxrl_reason" / "configs" / "tiny_default.py")
# Small rows and lengths: what is checked is the path (the rule shardings, the donation, the report), not the size.
SMALL = ["--config.parallel.mesh_shape.fsdp=2", "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
         "--config.rl.max_new_tokens=8", "--config.parallel.prompt_tokens=8", "--config.rl.eval_every=0"]


def _rc(*extra):
    return read_run_config(load_config_file(TINY, SMALL + list(extra)))


def _script(*argv):
    """experiments/launch/compile_tpu.py as a user runs it: (exit code, stdout)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "experiments" / "launch" / "compile_tpu.py"), *argv],
                          capture_output=True, text=True, timeout=1200, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def report():
    return cc.run_check(_rc(), "v5e:2x2", only={"update", "rollout decode"}, log=lambda s: None,
                        config_name="tiny_default.py")


@needs_libtpu
def test_update_and_decode_compile_for_v5e_with_the_compilers_memory_report(report):
    m = report["meta"]
    assert m["device_kind"] == "TPU v5 lite" and m["devices"] == 4 and m["hbm_gib"] == 16
    assert m["mesh"] == {"data": 1, "fsdp": 2, "tp": 1}
    rows = {r["name"]: r for r in report["executables"]}
    assert set(rows) == {"rollout decode", "update"}
    for r in rows.values():
        mem = r["memory"]
        assert mem["argument"] > 0 and mem["output"] > 0 and mem["code"] > 0
        assert r["peak_bytes"] == mem["argument"] + mem["output"] - mem["alias"] + mem["temp"] + mem["code"] \
            + r["resident_bytes"]
        assert r["fits"] and r["compiler_flops"] > 0 and r["roofline_s"] > 0
    upd = rows["update"]
    # params and optimizer state are donated: the compiler aliases them to the outputs. Per device (fsdp=2): the
    # update's arguments hold half of the float32 params and of both AdamW moments, at least.
    assert upd["memory"]["alias"] >= m["params_bytes"] + m["opt_state_bytes"] - 1024
    assert m["opt_state_bytes"] >= 2 * m["params_bytes"]
    assert report["step"]["fits"] and report["step"]["peak_bytes"] == max(r["peak_bytes"] for r in rows.values())
    assert 0 < report["step"]["mfu_bound"] <= 1
    # The planner beside the compiler. The sharded parameter and optimizer bytes are shapes both sides know; the
    # TPU's tiled layouts pad the tiny model's small arrays, so the compiler's count is at least the planner's.
    planner = {r["component"]: r for r in report["planner"]}
    assert set(planner) == {"params + optimizer state", "gradients + activations", "KV cache",
                            "sampling temporaries", "peak"}
    assert 0.5 < planner["params + optimizer state"]["ratio"] <= 1
    assert all(r["planner"] > 0 for r in planner.values()) and planner["KV cache"]["compiler"] > 0


@needs_libtpu
def test_an_impossible_hbm_size_does_not_fit_and_exits_3(tmp_path):
    rc, out, _ = _script("--config", TINY, "--topology", "v5e:2x2", "--hbm-gb", "0.001", "--only", "rollout decode",
                         "--out", str(tmp_path), *SMALL)
    assert rc == 3
    assert "DOES NOT FIT" in out
    assert (tmp_path / "compile_tpu.json").exists() and (tmp_path / "compile_tpu.md").exists()


@needs_libtpu
@pytest.mark.parametrize("topology, needle", [("v5e-4x4", "CHIP:AxB"), ("v7x:2x2", "CHIP:AxB"),
                                              ("v5e:1x1", "libtpu refused")])
def test_a_bad_topology_is_refused_before_compiling(topology, needle):
    with pytest.raises(cc.CompileCheckError, match=needle):
        cc.topology_devices(topology)


@needs_libtpu
def test_a_mesh_that_does_not_divide_the_topology_names_the_field_and_the_sizes():
    devices = cc.topology_devices("v5e:2x2")
    with pytest.raises(cc.CompileCheckError, match=r"parallel\.mesh_shape.*\[1, 2, 4\]"):
        cc.topology_mesh({"data": 1, "fsdp": 3, "tp": 1}, devices)
    with pytest.raises(cc.CompileCheckError, match=r"parallel\.mesh_shape.*\[1, 2, 4\]"):
        cc.topology_mesh({"data": 3, "fsdp": -1, "tp": 1}, devices)
    assert dict(cc.topology_mesh({"data": 1, "fsdp": -1, "tp": 2}, devices).shape) == {"data": 1, "fsdp": 2, "tp": 2}
    # tp=4 does not divide the tiny model's 2 kv heads: refused before compiling, naming the field
    with pytest.raises(cc.CompileCheckError, match=r"parallel\.mesh_shape.*num_key_value_heads=2"):
        cc.run_check(_rc("--config.parallel.mesh_shape.fsdp=1", "--config.parallel.mesh_shape.tp=4"), "v5e:2x2",
                     log=lambda s: None)
    # a proxy depth of no layers is refused before compiling, naming the flag
    with pytest.raises(cc.CompileCheckError, match=r"--layers=0"):
        cc.run_check(_rc(), "v5e:2x2", layers=0, log=lambda s: None)


@needs_libtpu
def test_a_batch_that_does_not_divide_the_data_axes_names_the_field_and_valid_values(tmp_path):
    # 2 x 2 rows over fsdp=2: 2 rows a shard; 3 micro-batches cannot split them, 1 or 2 can.
    with pytest.raises(cc.CompileCheckError, match=r"rl\.micro_batches in \[1, 2\]"):
        cc.run_check(_rc("--config.rl.micro_batches=3"), "v5e:2x2", log=lambda s: None)
    rc, _, err = _script("--config", TINY, "--topology", "v5e:2x2", "--out", str(tmp_path), *SMALL,
                         "--config.rl.micro_batches=3")
    assert rc == 2 and "rl.micro_batches" in err


def test_analytic_flops_match_the_compiler_on_an_unrolled_forward():
    """cost_analysis() counts a loop body once; with the layers unrolled (scan_layers=False) and no loop left, the
    compiler's FLOPs of a forward pass agree with `parallel.roofline.forward_flops` (its matmuls and attention;
    the compiler adds the elementwise work: a few percent)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxrl_reason.models.qwen2 import ModelConfig, init_model, positions_from_mask
    from jaxrl_reason.parallel.roofline import causal_pairs, forward_flops

    b, t = 4, 64

    def compiler_flops(cfg):
        graphdef, state = nnx.split(nnx.eval_shape(lambda: init_model(cfg, 0)))

        def forward(state, tokens):
            model = nnx.merge(graphdef, state)
            mask = jnp.ones_like(tokens)
            return model(tokens, positions_from_mask(mask), mask)

        cost = jax.jit(forward).lower(state, jax.ShapeDtypeStruct((b, t), jnp.int32)).compile().cost_analysis()
        return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]

    cfg = ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, scan_layers=False)
    unrolled = compiler_flops(cfg)
    # The forward computes attention scores over every key and masks them: its attention FLOPs are the full
    # square, not the causal half the analytic count (the useful work) takes.
    analytic = forward_flops(cfg, b * t, b * t * t, b * t)["flops"]
    assert abs(unrolled / analytic - 1) < 0.05, (unrolled, analytic)
    useful = forward_flops(cfg, b * t, b * causal_pairs(t), b * t)["flops"]
    assert useful < analytic
    # The same forward with its layers scanned: the compiler counts the scan body (one layer) once.
    scanned = compiler_flops(cfg.replace(scan_layers=True))
    one_layer = forward_flops(cfg.replace(num_hidden_layers=1), b * t, b * t * t, 0)["flops"]
    head = forward_flops(cfg, 0, 0, b * t)["flops"]
    assert abs(scanned / (one_layer + head) - 1) < 0.05, (scanned, one_layer + head)


@needs_libtpu
def test_a_lora_policy_compiles_with_adapter_only_optimizer_state_and_no_reference_copy(report):
    """`lora.rank > 0`: the update trains the adapters alone (its optimizer state is theirs), and a KL run's
    reference is the base with the adapters off, read from the policy's own weights (no second copy)."""
    kl = ["--config.method.beta=0.01", "--config.lora.rank=4"]
    lora = cc.run_check(_rc(*kl), "v5e:2x2", only={"update", "reference scoring"}, log=lambda s: None,
                        config_name="tiny_default.py")
    m, full = lora["meta"], report["meta"]
    assert m["lora_rank"] == 4 and full["lora_rank"] == 0
    assert m["reference_params_bytes"] == 0
    assert m["opt_state_bytes"] < full["opt_state_bytes"] / 4
    rows = {r["name"]: r for r in lora["executables"]}
    assert set(rows) == {"update", "reference scoring"} and all(r["fits"] for r in rows.values())


# ------------------------------------------------------------------------------------------------ NVIDIA GPU targets
# The CUDA PJRT plugin (jax-cuda12-plugin) compiles for an H100 with no GPU. It is kept out of the test environment
# (it would try CUDA in every JAX process): .ci/run installs it in a venv over this one's packages and names that
# venv's python in JAXRL_CUDA_PYTHON; the compile runs there, through the script.
CUDA_PYTHON = os.environ.get("JAXRL_CUDA_PYTHON") or (sys.executable if cc.cuda_plugin_available() else None)
needs_cuda_plugin = pytest.mark.skipif(CUDA_PYTHON is None, reason="no python with jax-cuda12-plugin "
                                       "(set JAXRL_CUDA_PYTHON, as .ci/run does)")


@needs_cuda_plugin
def test_update_and_decode_compile_for_h100_without_a_gpu(tmp_path):
    out = tmp_path / "gpu"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.run([CUDA_PYTHON, str(ROOT / "experiments" / "launch" / "compile_tpu.py"), "--config", TINY,
                           "--topology", "h100:2", "--only", "update,rollout decode", "--out", str(out), *SMALL],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "compile_tpu.json").read_text())
    m = res["meta"]
    assert "H100" in m["device_kind"] and m["devices"] == 2 and m["hbm_gib"] == 80
    assert m["chip"]["name"] == "NVIDIA H100 SXM"
    rows = {r["name"]: r for r in res["executables"]}
    assert set(rows) == {"rollout decode", "update"}
    for r in rows.values():
        mem = r["memory"]
        assert mem["argument"] > 0 and mem["output"] > 0 and r["fits"] and r["roofline_s"] > 0
    upd = rows["update"]
    assert upd["memory"]["alias"] >= m["params_bytes"] + m["opt_state_bytes"] - 1024  # donated, as on TPU
    # XLA's GPU compiler gives no cost analysis: the update's roofline is FLOPs-only and says so; the decode's
    # bytes are the roofline's own.
    assert upd["compiler_bytes"] is None and upd["roofline_bytes"] is None
    assert rows["rollout decode"]["roofline_bytes"] > 0
    assert "no cost analysis" in (out / "compile_tpu.md").read_text()
    # an impossible device memory is a DOES NOT FIT, as on TPU
    proc = subprocess.run([CUDA_PYTHON, str(ROOT / "experiments" / "launch" / "compile_tpu.py"), "--config", TINY,
                           "--topology", "h100:2", "--only", "update", "--hbm-gb", "0.0001", "--out",
                           str(tmp_path / "tiny"), *SMALL], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 3, proc.stderr[-3000:]


@pytest.mark.parametrize("topology", ["b200:8", "h100:", "h100-8"])
def test_a_bad_gpu_topology_names_the_gpu_form(topology):
    with pytest.raises(cc.CompileCheckError, match=r"CHIP:\[NODESx\]GPUS.*h100"):
        cc.topology_devices(topology)


@pytest.mark.parametrize("name,model", [("cipo_qwen3_4b_math.py", "qwen3-4b"),
                                        ("cipo_seed_coder_8b.py", "seed-coder-8b-instruct")])
def test_cipo_accelerator_presets_plan_a_node_whose_rows_hold_solves_and_corrections(name, model):
    """The CIPO presets plan for an 8-GPU node (one device cannot hold their correction caches or optimizer
    state): the planned update holds the solve rows and one correction group per query, a correction row's prompt
    (question + a whole attempt) and its correction fit the planned context, the model shape comes from a preset
    without weights, and the planner's peak for that batch fits the device memory named."""
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.parallel import memory
    from jaxrl_reason.parallel.mesh import resolve_mesh_shape

    c = load_config_file(str(ROOT / "jaxrl_reason" / "configs" / name))
    rc = read_run_config(c)
    cfg, source = cc.run_model_config(rc)
    assert source == f"preset {model}"
    r, p = rc.rl, rc.parallel.plan
    method = make_method({**c.method.to_dict(), "max_len": r.max_new_tokens})
    q, g = r.prompts_per_step, r.samples_per_prompt
    corrections = (method.replay_prompts or q) * method.correction_samples
    assert p.train_rows >= q * g + corrections and p.sample_rows >= max(q * g, corrections)
    budget = method.correction_max_new_tokens or r.max_new_tokens
    assert p.prompt_tokens + r.max_new_tokens + 64 + budget <= p.context  # + the replay template
    mesh = dict(zip(("data", "fsdp", "tp"), resolve_mesh_shape(dict(rc.parallel.mesh_shape), 8)))
    assert mesh["fsdp"] == 8
    shapes = cc.step_shapes(rc, method.name)
    cc.check_batch(shapes, 8)  # the update's rows split into micro-batches over the node
    from jaxrl_reason.buckets import power_of_two

    sample_length = power_of_two(p.prompt_tokens + r.max_new_tokens) + budget  # the correction sampler's slots
    plan = memory.plan(cfg, mesh, memory.BatchSettings(p.train_rows, p.context, p.sample_rows, sample_length,
                                                       r.micro_batches, r.logprob_chunk))
    hbm = rc.parallel.device_memory_gb * memory.GiB
    assert plan.fits(hbm), plan.table(hbm)
    one = memory.plan(cfg, {"data": 1, "fsdp": 1, "tp": 1},
                      memory.BatchSettings(p.train_rows, p.context, p.sample_rows, sample_length, r.micro_batches,
                                           r.logprob_chunk))
    assert not one.fits(hbm)  # why the node: the same batch on one GPU does not fit


def test_vine_and_correction_samplers_are_compiled_per_call_and_verify_rows_counted():
    """Without compiling (abstract shapes on the CPU mesh): VinePPO's continuations become a `vine` sampler at
    `vine_prompts_per_call` states a call, called once per chunk of the states at the `max_steps` cap; CIPO's
    corrections a `correction` sampler at `correction_prompts_per_call` replay prompts a call; a `_v` method's
    update holds a verify row per rollout."""
    import jax

    def exes(name, *over):
        rc = read_run_config(load_config_file(str(ROOT / "jaxrl_reason" / "configs" / name), list(over)))
        cfg, _ = cc.run_model_config(rc)
        mesh = cc.topology_mesh({"data": 1, "fsdp": 1, "tp": 1}, jax.devices()[:1])
        out, info = cc.step_executables(rc, cfg, mesh)
        return {e.name: e for e in out}, info, rc

    vine, info, rc = exes("vineppo_qwen25_math_1p5b.py")
    states = rc.rl.prompts_per_step * rc.rl.samples_per_prompt * (rc.method.extra["max_steps"] - 1)
    per_call = rc.method.extra["vine_prompts_per_call"]
    calls = -(-states // per_call)
    assert vine["vine decode"].calls == calls and vine["vine prefill"].calls == calls
    rows = per_call * rc.method.extra["vine_samples"]
    assert vine["vine decode"].note == f"{rows} rows x {rc.rl.max_new_tokens} steps"
    assert info["shapes"]["train_rows"] == 2 * rc.rl.prompts_per_step * rc.rl.samples_per_prompt  # + verify rows
    whole, _, _ = exes("vineppo_qwen25_math_1p5b.py", "--config.method.extra.vine_prompts_per_call=0")
    # one call over every state does the work of all the chunked calls (2,432 padded states either way)
    assert whole["vine decode"].calls == 1 and whole["vine decode"].flops == pytest.approx(
        vine["vine decode"].flops * vine["vine decode"].calls, rel=0.02)

    corr, _, rc = exes("cipo_qwen3_4b_math.py", "--config.method.extra.correction_prompts_per_call=8")
    assert corr["correction decode"].calls == rc.rl.prompts_per_step // 8
    assert corr["correction decode"].note.startswith(f"{8 * rc.method.extra['correction_samples']} rows")


def test_cure_critique_and_guided_samplers_are_sized_as_the_method_calls_them():
    """Without compiling (abstract shapes on the CPU mesh), the tiny CURE preset: the critique sampler holds the
    critique batch (`critique_batch_size`, 0 = half the rollouts; more than the rollouts when set so, samples then
    repeat) and the guided sampler its wrong half, M samples each -- the sizes `select_critique_rows` gives the
    method's calls, checked here on reward patterns from all wrong to all right."""
    import jax
    import numpy as np

    from jaxrl_reason.buckets import sampler_rows
    from jaxrl_reason.methods import make_method
    from jaxrl_reason.methods.cure import select_critique_rows

    def exes(*over):
        rc = read_run_config(load_config_file(str(ROOT / "jaxrl_reason" / "configs" / "cure.py"), list(over)))
        cfg, _ = cc.run_model_config(rc)
        mesh = cc.topology_mesh({"data": 1, "fsdp": 1, "tp": 1}, jax.devices()[:1])
        out, _ = cc.step_executables(rc, cfg, mesh)
        return {e.name: e for e in out}, rc, make_method(rc.method)

    for over in ([], ["--config.method.extra.critique_batch_size=3"], ["--config.rl.prompts_per_step=3",
                                                                          "--config.method.extra.critique_batch_size=40"]):
        out, rc, method = exes(*over)
        q, k = rc.rl.prompts_per_step, rc.rl.samples_per_prompt
        crit, guided = method.critique_sizes(q, k)
        assert crit == (rc.method.extra["critique_batch_size"] or q * k // 2)
        rng = np.random.default_rng(0)
        for p_right in (0.0, 0.3, 0.7, 1.0):  # the method's own selection: its size, at most `guided` wrong
            rewards = (rng.random((q, k)) < p_right).astype(np.float32)
            rows = select_critique_rows(rewards, method.critique_acc_range, crit, rng,
                                        zero_pass_floor=method.critique_zero_pass_floor)
            assert len(rows) <= crit and int(np.sum(rewards.reshape(-1)[rows] <= 0.5)) <= guided
            if 0.0 < p_right < 1.0:
                assert len(rows) == crit
        budget = rc.method.extra["critique_max_new_tokens"] or rc.rl.max_new_tokens
        assert out["critique decode"].note == f"{sampler_rows(crit)} rows x {budget} steps"
        assert out["critique prefill"].note.startswith(f"{sampler_rows(crit)} prompts x ")
        assert out["guided prefill"].note.startswith(f"{sampler_rows(guided)} prompts x ")
        m = rc.method.extra["guided_samples"]
        assert out["guided decode"].note == f"{sampler_rows(guided) * m} rows x {rc.rl.max_new_tokens} steps"
    assert crit > q * k  # the last setting: a critique batch larger than the rollouts (samples repeat)


def test_bytes_by_op_sums_to_the_compilers_count():
    """Each op costed alone adds up to what the compiler bills the whole module (CPU: no on-chip memory space, so
    the HBM count is the whole count)."""
    import jax
    import jax.numpy as jnp

    from jaxrl_reason.experiment.compile_check import bytes_by_op

    def f(x, w, cache, i):
        y = jnp.tanh(x @ w)
        return y.sum(-1), jax.lax.dynamic_update_slice(cache, y[:, None, :], (0, i, 0))

    args = (jnp.ones((8, 64)), jnp.ones((64, 32)), jnp.zeros((8, 16, 32)), 3)
    compiled = jax.jit(f, donate_argnums=(2,)).lower(*args).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    rows = bytes_by_op(compiled.as_text())
    # within 1%: the ops left out as moving no data (parameters, constants, tuples, bitcasts) are billed a few bytes
    assert rows and sum(r["bytes"] for r in rows) == pytest.approx(cost["bytes accessed"], rel=1e-2)
    # hbm_bytes adds the analysis' per-operand entries, which can sum a few bytes above its per-op total
    assert sum(r["hbm_bytes"] for r in rows) == pytest.approx(sum(r["bytes"] for r in rows), rel=1e-2)
