"""Scale-out: mesh shapes, partition rules, the memory planner, and — on 8 fake CPU devices in a subprocess
(tests/parallel_checks.py) — sharded updates, sampling, loading and checkpoints equal to one device."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxrl_reason.models.qwen2 import ModelConfig
from jaxrl_reason.parallel import memory, rules
from jaxrl_reason.parallel.mesh import initialize_distributed, resolve_mesh_shape

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CFG = ModelConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)


def sizes(data=1, fsdp=1, tp=1):
    return memory._Sizes({"data": data, "fsdp": fsdp, "tp": tp})


# ---------------------------------------------------------------------------------------------- mesh shapes


def test_mesh_shape_resolution():
    assert resolve_mesh_shape({"data": 2, "fsdp": -1, "tp": 2}, 16) == (2, 4, 2)
    assert resolve_mesh_shape({"tp": 2}, 2) == (1, 1, 2)
    assert resolve_mesh_shape((-1, 1, 1), 8) == (8, 1, 1)
    with pytest.raises(ValueError, match="unknown axis name"):
        resolve_mesh_shape({"model": 2}, 2)
    with pytest.raises(ValueError, match="at most one axis"):
        resolve_mesh_shape({"data": -1, "fsdp": -1}, 8)
    with pytest.raises(ValueError, match="covers 4 devices but 8"):
        resolve_mesh_shape({"data": 2, "fsdp": 2}, 8)
    with pytest.raises(ValueError, match="do not divide"):
        resolve_mesh_shape({"data": 3, "tp": -1}, 8)


def test_initialize_distributed_single_process_and_bad_env(monkeypatch):
    for v in ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "NUM_PROCESSES",
              "JAX_PROCESS_ID", "PROCESS_ID"):
        monkeypatch.delenv(v, raising=False)
    assert initialize_distributed() is False  # nothing configured: a single-process run
    with pytest.raises(ValueError, match="no coordinator address"):
        initialize_distributed(num_processes=2)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "localhost:1234")
    with pytest.raises(ValueError, match="num_processes and process_id"):
        initialize_distributed()


# ---------------------------------------------------------------------------------------------- rules


def test_rules_give_the_documented_specs():
    m = sizes(2, 2, 2)
    assert rules.spec_for("embed_tokens/weight", (256, 32), m) == P("tp", "fsdp")
    assert rules.spec_for("lm_head/kernel", (32, 256), m) == P("fsdp", "tp")
    assert rules.spec_for("layers/self_attn/k_proj/kernel", (2, 32, 16), m) == P(None, "fsdp", "tp")
    assert rules.spec_for("layers/self_attn/q_proj/bias", (2, 32), m) == P(None, "tp")
    assert rules.spec_for("layers/self_attn/o_proj/kernel", (2, 32, 32), m) == P(None, "tp", "fsdp")
    assert rules.spec_for("layers/mlp/down_proj/kernel", (2, 64, 32), m) == P(None, "tp", "fsdp")
    assert rules.spec_for("layers/post_attention_layernorm/weight", (2, 32), m) == P()
    # optimizer-state paths end with the parameter's path, so the same rules apply
    assert rules.spec_for("1/0/nu/layers/mlp/up_proj/kernel", (2, 32, 64), m) == P(None, "fsdp", "tp")
    assert rules.spec_for("1/0/count", (), m) == P()


def test_indivisible_dimension_is_an_error_naming_the_tensor():
    with pytest.raises(rules.ShardingError, match=r"layers/mlp/up_proj/kernel: dimension 2 of size 60 .* 'tp' of "
                                                  r"size 8"):
        rules.spec_for("layers/mlp/up_proj/kernel", (2, 32, 60), sizes(tp=8))
    with pytest.raises(rules.ShardingError, match="no partition rule matches"):
        rules.spec_for("layers/mystery/kernel", (2, 3), sizes())
    with pytest.raises(rules.ShardingError, match="num_key_value_heads=2 .* 'tp' of size 4"):
        rules.check_model_on_mesh(CFG, sizes(tp=4))


# ---------------------------------------------------------------------------------------------- memory planner


def test_memory_plan_matches_hand_count():
    h, i, v, L, d = 32, 64, 256, 2, 8
    b = memory.BatchSettings(train_rows=8, train_length=16, sample_rows=8, sample_length=32)
    one = memory.plan(CFG, {"data": 1, "fsdp": 1, "tp": 1}, b)
    assert one.params == CFG.num_params() * 4
    # AdamW: mu and nu like the params, plus int32 step counts (Adam's and the schedule's)
    assert one.optimizer_state == 2 * one.params + 2 * 4
    # fsdp=2, tp=2: every matrix in 4 pieces, q/k/v biases over tp only, norms whole
    m = memory.plan(CFG, {"data": 1, "fsdp": 2, "tp": 2}, b)
    matrices = v * h * 2 + L * (h * d * (4 + 2 * 2 + 4) + 3 * h * i)  # q, k, v, o; gate, up, down
    biases = L * d * (4 + 2 * 2)
    norms = (2 * L + 1) * h
    assert m.params == 4 * (matrices // 4 + biases // 2 + norms)
    # KV cache: k and v per layer, rows over data x fsdp, kv heads over tp, plus the [rows, slots] valid mask
    rows = 8 // 2
    assert m.kv_cache == 2 * L * rows * (2 // 2) * d * 32 * 4 + rows * 32
    more = memory.plan(CFG, {"data": 1, "fsdp": 4, "tp": 2}, b)
    assert more.params < m.params and more.activations < m.activations
    assert m.fits(m.peak / 0.9 + 1) and not m.fits(m.peak / 0.9 - 1)
    # Sampling: next-token logits and their log-softmax (float32, rows over data x fsdp, vocab over tp), and the
    # decode's fused layer weights, a whole copy per device split over tp only (what the TPU compiler allocates).
    from jaxrl_reason.parallel.roofline import layer_matmul_params

    assert m.sampling_logits == 2 * 4 * rows * v // 2 + L * layer_matmul_params(CFG) * 4 // 2
    assert more.sampling_logits - 2 * 4 * (8 // 4) * v // 2 == m.sampling_logits - 2 * 4 * rows * v // 2
    # decode_weights="per_layer": the fused layers split over fsdp x tp, one layer and the LM head whole over fsdp
    # (gathered inside the step); "gathered" (above) holds every layer whole.
    layer = layer_matmul_params(CFG) * 4 // 2
    per = memory.plan(CFG.replace(decode_weights="per_layer"), {"data": 1, "fsdp": 4, "tp": 2}, b)
    assert per.sampling_logits == 2 * 4 * (8 // 4) * v // 2 + L * layer // 4 + layer + v * h * 4 // 2
    deep = CFG.replace(num_hidden_layers=28)  # a 7B's depth: the per-layer gather holds far less
    assert memory.decode_weight_bytes(deep.replace(decode_weights="per_layer"), {"fsdp": 16}) < \
        memory.decode_weight_bytes(deep, {"fsdp": 16}) / 4
    # without an fsdp split there is nothing to gather per layer: the same bytes as "gathered"
    assert memory.plan(CFG.replace(decode_weights="per_layer"), {"data": 2, "fsdp": 1, "tp": 2}, b) == \
        memory.plan(CFG, {"data": 2, "fsdp": 1, "tp": 2}, b)
    # The LM head at `scored` positions only: the update's float32 logits shrink by 3 x 4 x vocab per position.
    scored = memory.plan(CFG, {"data": 1, "fsdp": 1, "tp": 1}, b._replace(scored=40))
    assert one.activations - scored.activations == 3 * 4 * (8 * 16 - 40) * v


def test_remat_plan_holds_one_backward_phase_and_no_step_copy():
    """With remat the LM head's backward and a layer's rebuilt backward do not overlap, so the plan holds the larger
    of the two, not their sum; and the guarded step's new params and optimizer state take the place of the
    backward's buffers instead of adding half a copy to them. The sum and the half copy put the plan of Qwen2.5-7B's
    remat update on v5e-16 at 1.26x the TPU compiler's temporaries; this at 0.97-1.04 for 2, 4 and 28 layers
    (docs/results/tpu_compile.md)."""
    from jaxrl_reason.models.qwen2 import as_dtype

    act_b = np.dtype(as_dtype(CFG.dtype)).itemsize
    h, v, layers, t = CFG.hidden_size, CFG.vocab_size, CFG.num_hidden_layers, 16
    fsdp = {"data": 1, "fsdp": 4, "tp": 1}
    b = memory.BatchSettings(train_rows=8, train_length=t, micro_batches=2)
    rows = 8 // 2 // 4
    remat = memory.plan(CFG.replace(remat=True), fsdp, b)
    every = memory.plan(CFG.replace(scan_residuals="all"), fsdp, b)  # keeps each layer's full set: L of them
    logits = 3 * 4 * rows * t * v + 4 * h * v  # float32 logits x 3, the untied fsdp head's float32 gradient
    rebuilt = (every.activations - logits) // layers  # one layer's full set
    head = logits + act_b * h * v  # with the head's gathered weight, alive in its backward
    assert rebuilt > 0 and head > 0
    assert remat.activations == rows * t * layers * act_b * h + max(head, rebuilt)
    step_copy = remat.params + remat.optimizer_state  # trains everything: the new params and optimizer state
    assert remat.gradients == 2 * remat.params + max(0, step_copy - remat.activations)
    # Long rows: a rebuilt layer's attention scores outgrow the head, and the plan follows the larger phase.
    long = memory.BatchSettings(train_rows=8, train_length=128, micro_batches=2)
    deep = memory.plan(CFG.replace(remat=True), fsdp, long)
    every = memory.plan(CFG.replace(scan_residuals="all"), fsdp, long)
    logits = 3 * 4 * rows * 128 * v + 4 * h * v
    rebuilt = (every.activations - logits) // layers
    assert rebuilt > logits + act_b * h * v and deep.activations == rows * 128 * layers * act_b * h + rebuilt
    # A tied embedding on an fsdp mesh: no whole float32 gradient, but the head's gathered weight all the same.
    tied = CFG.replace(remat=True, tie_word_embeddings=True)
    tied_plan = memory.plan(tied, fsdp, b)
    every = memory.plan(tied.replace(remat=False, scan_residuals="all"), fsdp, b)
    logits = 3 * 4 * rows * t * v
    rebuilt = (every.activations - logits) // layers
    assert tied_plan.activations == rows * t * layers * act_b * h + max(logits + act_b * h * v, rebuilt)
    # Two-token rows on one device: the step's new state outgrows the backward, and the plan holds it.
    tiny = memory.plan(CFG.replace(remat=True), {"data": 1, "fsdp": 1, "tp": 1},
                       memory.BatchSettings(train_rows=1, train_length=2))
    assert tiny.gradients == tiny.params + tiny.optimizer_state + 2 * tiny.params - tiny.activations > 2 * tiny.params
    # Without remat nothing changes: the half copy stays (the compiler's non-remat temporaries exceed the live set).
    plain = memory.plan(CFG, fsdp, b)
    assert plain.gradients == 2 * plain.params + (plain.params + plain.optimizer_state) // 2


@pytest.mark.slow  # 19-31 s a call on 2 shared cores (2026-12-07)
@pytest.mark.parametrize("policy", ["all", "matmuls", "remat"])
def test_activation_plan_follows_the_residual_policy(policy):
    """Against XLA's own count (temp bytes of the compiled update, one CPU device, activations dominating): the
    plan is close for every residual policy, never under by much, and orders them as the compiler does. It used
    to count "all" for every policy (2.8x over for "matmuls" at 8 layers)."""
    from flax import nnx

    from jaxrl_reason.models.qwen2 import init_model
    from jaxrl_reason.rl.batch import build_token_batch
    from jaxrl_reason.rl.losses import pg_spec
    from jaxrl_reason.train.state import make_optimizer
    from jaxrl_reason.train.update import make_update

    rows, t = 16, 256
    kw = {"remat": True} if policy == "remat" else {"scan_residuals": policy}
    cfg = ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=t, **kw)
    rng = np.random.default_rng(0)
    comps = [rng.integers(3, 500, t - 8).tolist() for _ in range(rows)]
    batch = build_token_batch([rng.integers(3, 500, 8).tolist() for _ in range(rows)], comps,
                              np.ones(rows, np.float32), [[-5.0] * len(c) for c in comps], "solve", length=t)
    graphdef, params = nnx.split(init_model(cfg, 0))
    opt = make_optimizer(1e-3, total_steps=10)
    compiled = make_update(graphdef, opt, (pg_spec(),)).lower(params, opt.init(params), batch).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    settings = memory.BatchSettings(train_rows=rows, train_length=t)
    one = {"data": 1, "fsdp": 1, "tp": 1}
    plan = memory.plan(cfg, one, settings)
    assert 0.9 * temp <= plan.activations + plan.gradients <= 1.5 * temp, (policy, plan.activations, temp)
    planned = [memory.plan(cfg.replace(remat=False, scan_residuals="all"), one, settings).activations,
               memory.plan(cfg.replace(remat=False, scan_residuals="matmuls"), one, settings).activations,
               memory.plan(cfg.replace(remat=True), one, settings).activations]
    assert planned[0] > planned[1] > planned[2], planned


def test_plan_memory_cli():
    script = os.path.join(ROOT, "experiments", "plan_memory.py")
    args = ["--model", "qwen2.5-math-1.5b", "--mesh", "fsdp=-1", "--devices", "8", "--train-rows", "160",
            "--train-length", "1024", "--micro-batches", "8", "--sample-rows", "160", "--sample-length", "1024"]
    ok = subprocess.run([sys.executable, script] + args + ["--device-memory-gb", "80"], capture_output=True,
                        text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "fsdp=8" in ok.stdout and "FITS in 80.0 GiB" in ok.stdout
    for row in ("params", "optimizer state", "gradients", "activations", "KV cache"):
        assert row in ok.stdout
    small = subprocess.run([sys.executable, script] + args + ["--device-memory-gb", "4"], capture_output=True,
                           text=True, cwd=ROOT)
    assert small.returncode == 3 and "DOES NOT FIT" in small.stdout, small.stderr
    bad = subprocess.run([sys.executable, script, "--model", "qwen2.5-math-1.5b", "--mesh", "tp=4"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode != 0 and "num_key_value_heads=2" in bad.stderr, bad.stderr


# ---------------------------------------------------------------------------------------------- 8 devices


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel") / "results.json"
    from processes import cpu_devices_env

    env = cpu_devices_env(8)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "parallel_checks.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


MESHES = ("8,1,1", "2,2,2", "1,4,2")


@pytest.mark.slow
def test_sharded_update_equals_one_device(eight):
    u = eight["update"]
    for name in MESHES:
        np.testing.assert_allclose(u[name]["losses"], u["reference_losses"], rtol=1e-6)
        np.testing.assert_allclose(u[name]["grad_norm"], u["reference_grad_norm"], rtol=1e-5)
        # AdamW divides by sqrt(v): float32 rounding in near-zero gradients moves a parameter by up to ~lr
        # times a rounding ratio; 200x below how far the params moved.
        assert u[name]["param_max_diff"] < 1e-4 < 2e-2 < u[name]["param_moved"]
        # the LM head only at trained positions, each batch shard gathering its own: the same update
        np.testing.assert_allclose(u[name]["trained_only"]["losses"], u["reference_losses"], rtol=1e-6)
        assert u[name]["trained_only"]["param_max_diff"] < 1e-4
    assert u["reference_losses"][0] != u["reference_losses"][1]  # the second step saw updated params


@pytest.mark.slow
def test_params_and_optimizer_state_are_sharded_as_the_rules_say(eight):
    for name in MESHES:
        for tree in ("params", "opt_state"):
            for path, leaf in eight["update"][name][tree].items():
                assert leaf["mesh_match"], path
                # JAX drops trailing None entries of a spec
                actual = leaf["spec"] + ["None"] * (len(leaf["expected"]) - len(leaf["spec"]))
                assert actual == leaf["expected"], (name, tree, path)
    p = eight["update"]["1,4,2"]["params"]
    # hand-computed local shards on (data=1, fsdp=4, tp=2)
    assert p["embed_tokens/weight"]["shard"] == [256 // 2, 32 // 4]
    assert p["lm_head/kernel"]["shard"] == [32 // 4, 256 // 2]
    assert p["layers/self_attn/q_proj/kernel"]["shard"] == [2, 32 // 4, 32 // 2]
    assert p["layers/self_attn/k_proj/kernel"]["shard"] == [2, 32 // 4, 16 // 2]
    assert p["layers/mlp/down_proj/kernel"]["shard"] == [2, 64 // 2, 32 // 4]
    assert p["layers/input_layernorm/weight"]["shard"] == [2, 32]
    o = eight["update"]["1,4,2"]["opt_state"]
    assert o["1/0/mu/layers/mlp/up_proj/kernel"]["shard"] == [2, 32 // 4, 64 // 2]
    assert o["1/0/nu/embed_tokens/weight"]["shard"] == [256 // 2, 32 // 4]
    assert eight["update"]["8,1,1"]["params"]["layers/mlp/up_proj/kernel"]["shard"] == [2, 32, 64]


@pytest.mark.slow
def test_per_device_bytes_drop_as_fsdp_grows(eight):
    mem = eight["memory"]
    order = ["8,1,1", "4,2,1", "2,4,1"]  # fsdp = 1, 2, 4 on 8 devices
    for name in order:  # the planner's exact parts equal the real shard sizes
        assert mem[name]["plan_params"] == mem[name]["param_shard_bytes"]
        assert mem[name]["plan_opt"] == mem[name]["opt_shard_bytes"]
    peaks = [mem[n]["peak"] for n in order]
    args = [mem[n]["argument"] for n in order]
    assert peaks[0] > peaks[1] > peaks[2], peaks
    assert args[0] > args[1] > args[2], args
    assert mem["2,4,1"]["param_shard_bytes"] < mem["8,1,1"]["param_shard_bytes"] / 3


@pytest.mark.slow
def test_sampler_gives_the_same_greedy_tokens_on_every_mesh(eight):
    s = eight["sampler"]
    assert len(s["reference"]) == 16 and len({tuple(r) for r in s["reference"]}) > 2  # prompts differ
    for name in MESHES:
        assert s[name]["tokens"] == s["reference"], name
        assert s[name]["logprob_max_diff"] < 1e-4
    # the per-layer gather of the decode's weights changes where they live, not one bit of what is sampled
    per_layer = dict(eight["sampler_per_layer"])
    assert per_layer.pop("gathered_barriers") == 0  # the default decode: the program before the knob
    assert set(per_layer) == set(MESHES)
    for name, same in per_layer.items():
        barriers = same.pop("barriers")
        assert all(same.values()), (name, same)
        # one barrier per layer where fsdp splits the weights (2 layers), none on a mesh without fsdp
        assert barriers == (0 if name == "8,1,1" else 2), (name, barriers)
    kv = eight["kv_cache"]
    assert kv["k_spec"][:2] == ["('data', 'fsdp')", "tp"]
    assert kv["k_shard"] == [8 // 4, 2 // 2, 8, 16] and kv["logit_max_diff"] < 1e-5


@pytest.mark.slow
def test_checkpoint_saved_on_one_mesh_restores_on_another(eight):
    c = eight["checkpoint"]
    assert c["restored_param_max_diff"] == 0.0 and c["restored_step"] == 1
    assert c["extra"] == {"data_position": 16}
    up = c["restored_layout"]["layers/mlp/up_proj/kernel"]
    assert up["mesh_match"] and up["shard"] == [2, 32 // 2, 64 // 2]  # now on (2, 2, 2)
    assert c["restored_opt_layout"]["1/0/mu/lm_head/kernel"]["shard"] == [32 // 2, 256 // 2]
    for k in ("loss/pg", "grad_norm", "solve/entropy", "solve/approx_kl", "update_norm"):
        assert c["metrics_b"][k] == pytest.approx(c["metrics_a"][k], rel=1e-5), k
    assert c["next_param_max_diff"] < 1e-4


@pytest.mark.slow
def test_loading_places_each_tensor_in_its_sharding(eight):
    ld = eight["loading"]
    assert ld["max_diff"] == 0.0  # HF round trip is exact in float32
    assert ld["init_max_diff"] < 1e-6  # init compiled with sharded outputs = the eager initialiser
    for layout in (ld["layout"], ld["init_layout"]):
        for path, leaf in layout.items():
            actual = leaf["spec"] + ["None"] * (len(leaf["expected"]) - len(leaf["spec"]))
            assert actual == leaf["expected"], path
        assert layout["layers/mlp/gate_proj/kernel"]["shard"] == [2, 32 // 4, 64 // 2]


@pytest.mark.slow
def test_errors_name_the_tensor_on_a_real_mesh(eight):
    e = eight["errors"]
    assert "num_key_value_heads=2" in e["heads"] and "'tp' of size 4" in e["heads"]
    assert e["mlp"].startswith("layers/mlp/") and "size 60" in e["mlp"] and "'tp' of size 8" in e["mlp"]
    assert e["batch"].startswith("batch/") and "size 12" in e["batch"]


# ---------------------------------------------------------------------------------------------- two processes


@pytest.mark.slow
def test_two_processes_with_jax_distributed_match_one_process(tmp_path):
    from processes import run_two_and_one

    multi, single = tmp_path / "multi", tmp_path / "single"
    multi.mkdir(), single.mkdir()
    run_two_and_one(os.path.join(HERE, "parallel_multiprocess.py"), [multi], [single], timeout=600)
    m = json.loads((multi / "metrics.json").read_text())
    s = json.loads((single / "metrics.json").read_text())
    assert m["process_count"] == 2 and m["device_count"] == 4 and s["process_count"] == 1
    # each process loaded only its half of the rows; only process 0 wrote metrics
    assert m["local_rows"] == [0, 4] and json.loads((multi / "rows_1.json").read_text())["local_rows"] == [4, 8]
    assert sorted(os.listdir(multi)) == ["metrics.json", "params.npz", "rows_1.json"]
    for a, b in zip(m["history"], s["history"]):
        for k in ("loss/pg", "grad_norm", "solve/entropy", "update_norm"):
            assert a[k] == pytest.approx(b[k], rel=1e-5), k
    assert m["history"][0]["loss/pg"] != m["history"][1]["loss/pg"]
    pm, ps = np.load(multi / "params.npz"), np.load(single / "params.npz")
    assert sorted(pm.files) == sorted(ps.files) and len(pm.files) == 15
    for k in pm.files:
        np.testing.assert_allclose(pm[k], ps[k], atol=1e-5)


@pytest.mark.parametrize("name, devices", [("rlv_qwen25_math_1p5b_8gpu", 8), ("rlv_qwen25_math_1p5b_v5e16", 16)])
def test_launch_configs_fit_their_devices(name, devices):
    """The launch configs' mesh and batch settings, planned for the device count they target, fit its memory."""
    from jaxrl_reason.configs import config_path, load_config_file
    from jaxrl_reason.models.presets import load_model_config

    c = load_config_file(config_path(name))
    mesh = dict(zip(("data", "fsdp", "tp"), resolve_mesh_shape(c.parallel.mesh_shape.to_dict(), devices)))
    cfg = load_model_config("qwen2.5-math-1.5b", "float32", c.model.dtype)
    rollouts = c.rl.prompts_per_step * c.rl.samples_per_prompt
    length = 1024  # the configs' context: prompt + max_new_tokens
    batch = memory.BatchSettings(train_rows=2 * rollouts, train_length=length, sample_rows=rollouts,
                                 sample_length=length, micro_batches=c.rl.micro_batches)  # solve + verify rows
    plan = memory.plan(cfg, mesh, batch)
    assert plan.fits(c.parallel.device_memory_gb * memory.GiB), plan.table(c.parallel.device_memory_gb * memory.GiB)
