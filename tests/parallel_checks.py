"""Measurements on 8 fake CPU devices, run in a subprocess by tests/test_parallel.py (XLA_FLAGS must be set before
JAX starts, which the parent pytest process cannot do for itself). Prints one JSON object of raw measurements;
the assertions live in the test file.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/parallel_checks.py OUT.json [group ...]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jaxrl_reason.models.qwen2 import ModelConfig, init_model  # noqa: E402
from jaxrl_reason.parallel import memory, rules  # noqa: E402
from jaxrl_reason.parallel.mesh import batch_shards, make_mesh  # noqa: E402
from jaxrl_reason.rl.batch import build_token_batch, scored_size  # noqa: E402
from jaxrl_reason.rl.losses import pg_spec  # noqa: E402
from jaxrl_reason.train.state import TrainState, make_optimizer  # noqa: E402
from jaxrl_reason.train.update import make_sharded_update, make_update  # noqa: E402

CFG = ModelConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False, rope_theta=10000.0)
MESHES = {"8,1,1": (8, 1, 1), "2,2,2": (2, 2, 2), "1,4,2": (1, 4, 2)}
TERMS = (pg_spec(("solve",)),)


def toy_batch(rows=16, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, 256, rng.integers(2, 6)).tolist() for _ in range(rows)]
    completions = [rng.integers(3, 256, rng.integers(1, 9)).tolist() for _ in range(rows)]
    adv = rng.normal(size=rows).astype(np.float32)
    old = [(-5.0 + 0.1 * rng.normal(size=len(c))).tolist() for c in completions]
    return build_token_batch(prompts, completions, adv, old, "solve", length=16)


def optimizer():
    return make_optimizer(1e-2, total_steps=10, weight_decay=0.01)


def host(tree):
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), tree)


def max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def run_steps(update, params, opt_state, batches, scored=None):
    losses = []
    for i, b in enumerate(batches):
        out = update(params, opt_state, b) if scored is None else update(params, opt_state, b, scored=scored[i])
        params, opt_state = out.params, out.opt_state
        losses.append({k: float(v) for k, v in out.metrics.items()})
    return params, opt_state, losses


def reference(batches):
    """One device, no mesh: the unmodified `make_update`."""
    graphdef, params = nnx.split(init_model(CFG, seed=0))
    opt = optimizer()
    update = make_update(graphdef, opt, TERMS)
    return run_steps(update, jax.tree.map(jnp.copy, params), opt.init(params), batches)


_UPDATES = {}


def sharded_update(shape, batch, cfg=CFG):
    """The sharded update for a mesh shape, compiled once per process and shared by every group."""
    if (shape, cfg) not in _UPDATES:
        mesh = make_mesh(shape)
        graphdef, params = nnx.split(init_model(cfg, seed=0))
        opt = optimizer()
        params = rules.shard_params(params, mesh)
        opt_state = rules.init_opt_state(opt, params, mesh)
        update, ps, os_, bs = make_sharded_update(graphdef, opt, TERMS, mesh, params, opt_state, batch)
        _UPDATES[shape, cfg] = (mesh, update, bs,
                                update.lower(params, opt_state, rules.shard_tree(batch, bs)).compile())
    return _UPDATES[shape, cfg]


def fresh_state(mesh, cfg=CFG):
    p = nnx.split(init_model(cfg, seed=0))[1]
    p = rules.shard_params(p, mesh)
    return p, rules.init_opt_state(optimizer(), p, mesh)


def sharded_run(shape, batches, head_at_trained_only=False):
    """head_at_trained_only: the LM head only at trained positions, gathered per batch shard."""
    mesh, update, bs, _ = sharded_update(shape, batches[0])
    p, o = fresh_state(mesh)
    scored = [scored_size(b, 1, batch_shards(mesh)) for b in batches] if head_at_trained_only else None
    placed = [rules.shard_tree(b, bs) for b in batches]
    p, o, losses = run_steps(update, p, o, placed, scored)
    return mesh, p, o, losses


def layout_report(tree, mesh):
    """{path: {"spec": actual spec, "expected": rule spec, "shard": local shard shape, "shape": global}}."""
    expected = rules.tree_specs(tree, mesh)
    out = {}
    for (kp, x), spec in zip(jax.tree_util.tree_leaves_with_path(tree),
                             jax.tree.leaves(expected, is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec))):
        out[rules.path_str(kp)] = {"spec": [str(a) for a in x.sharding.spec],
                                   "expected": [str(a) for a in spec],
                                   "shard": list(x.addressable_shards[0].data.shape), "shape": list(x.shape),
                                   "mesh_match": x.sharding.mesh.shape == mesh.shape}
    return out


def group_update(res):
    batches = [toy_batch(seed=1), toy_batch(seed=2)]
    ref_p, _, ref_losses = reference(batches)
    res["update"] = {"reference_losses": [l["loss/pg"] for l in ref_losses],
                     "reference_grad_norm": [l["grad_norm"] for l in ref_losses]}
    for name, shape in MESHES.items():
        mesh, p, o, losses = sharded_run(shape, batches)
        res["update"][name] = {
            "losses": [l["loss/pg"] for l in losses], "grad_norm": [l["grad_norm"] for l in losses],
            "param_max_diff": max_diff(host(p), host(ref_p)),
            "param_moved": max_diff(host(p), host(nnx.split(init_model(CFG, seed=0))[1])),
            "params": layout_report(p, mesh), "opt_state": layout_report(o, mesh)}
        _, p, _, losses = sharded_run(shape, batches, head_at_trained_only=True)
        res["update"][name]["trained_only"] = {"losses": [l["loss/pg"] for l in losses],
                                               "param_max_diff": max_diff(host(p), host(ref_p))}


# Parameters large next to the activations, as in real models: what fsdp saves must show in the peak.
MEM_CFG = CFG.replace(vocab_size=2048, hidden_size=128, intermediate_size=512)


def compiled_bytes(shape, batch):
    mesh, _, _, compiled = sharded_update(shape, batch, MEM_CFG)
    m = compiled.memory_analysis()
    p, o = fresh_state(mesh, MEM_CFG)
    param_bytes = sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(p))
    opt_bytes = sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(o))
    plan = memory.plan(MEM_CFG, mesh, memory.BatchSettings(train_rows=batch.tokens.shape[0],
                                                        train_length=batch.tokens.shape[1]))
    return {"argument": int(m.argument_size_in_bytes), "temp": int(m.temp_size_in_bytes),
            "output": int(m.output_size_in_bytes), "alias": int(m.alias_size_in_bytes),
            "peak": int(m.argument_size_in_bytes + m.temp_size_in_bytes + m.output_size_in_bytes
                        - m.alias_size_in_bytes),
            "param_shard_bytes": int(param_bytes), "opt_shard_bytes": int(opt_bytes),
            "plan_params": plan.params, "plan_opt": plan.optimizer_state, "plan_grads": plan.gradients}


def group_memory(res):
    batch = toy_batch(rows=8, seed=1)
    res["memory"] = {f"{d},{f},1": compiled_bytes((d, f, 1), batch) for d, f in ((8, 1), (4, 2), (2, 4))}


def _decode_barriers(model, state, mesh) -> int:
    """Optimization barriers in one traced decode step of `model` on `mesh`."""
    from jaxrl_reason.models.qwen2 import KVCache, decode_layers, decode_step

    graphdef = nnx.graphdef(model)

    def step(state):
        m = nnx.merge(graphdef, state)
        tok = jnp.zeros((8,), jnp.int32)
        return decode_step(m, decode_layers(m), tok, tok, jnp.ones((8,), bool), KVCache.zeros(m.config, 8, 16))[0]

    with jax.set_mesh(mesh):
        return str(jax.make_jaxpr(step)(state)).count("optimization_barrier")


def group_sampler(res):
    from jaxrl_reason.sampling.sampler import sample

    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16], [17, 18, 19], [20], [21, 22, 23, 24, 25]]
    model = init_model(CFG, seed=5)
    key = jax.random.PRNGKey(0)
    kw = dict(max_new_tokens=10, temperature=0.0, num_samples=2)
    ref = sample(model, prompts, key, **kw)
    res["sampler"] = {"reference": ref.tokens.tolist(), "reference_logprobs": ref.logprobs.tolist()}
    graphdef, params = nnx.split(model)
    for name, shape in MESHES.items():
        mesh = make_mesh(shape)
        sp = rules.shard_params(params, mesh)
        out = sample(model, prompts, key, state=sp, **kw)
        res["sampler"][name] = {"tokens": out.tokens.tolist(),
                                "logprob_max_diff": float(np.max(np.abs(out.logprobs - ref.logprobs)))}
    # decode_weights="per_layer" (each layer's weights gathered inside the step, not all once per call): at
    # temperature 1, so every draw reads the log-probs' bits, the same outputs as the gathered decode on each mesh.
    per_layer = init_model(CFG.replace(decode_weights="per_layer"), seed=5)
    kw1 = dict(max_new_tokens=10, temperature=1.0, num_samples=2)
    res["sampler_per_layer"] = {}
    for name, shape in MESHES.items():
        sp = rules.shard_params(params, make_mesh(shape))
        a, b = sample(model, prompts, key, state=sp, **kw1), sample(per_layer, prompts, key, state=sp, **kw1)
        res["sampler_per_layer"][name] = {f: getattr(a, f).tolist() == getattr(b, f).tolist()
                                          for f in ("tokens", "logprobs", "sampling_logprobs", "lengths")}
        # ...and the per-layer gather is really there on an fsdp mesh (a barrier per layer), absent without fsdp
        res["sampler_per_layer"][name]["barriers"] = _decode_barriers(per_layer, sp, make_mesh(shape))
    res["sampler_per_layer"]["gathered_barriers"] = _decode_barriers(model, params, make_mesh((1, 4, 2)))
    # One decode step with the KV cache explicitly laid out by kv_cache_shardings (rows x kv heads).
    from jaxrl_reason.models.qwen2 import KVCache

    mesh = make_mesh((2, 2, 2))
    toks = jnp.asarray(np.arange(8 * 4).reshape(8, 4) % 200 + 3, jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(4), (8, 4))

    @jax.jit
    def step(state, cache):
        m = nnx.merge(graphdef, state)
        return m(toks, pos, jnp.ones_like(toks), cache=cache)

    cache0 = KVCache.zeros(CFG, 8, 16)
    ref_logits, _ = step(params, cache0)
    cs = rules.kv_cache_shardings(cache0, mesh)
    cache_s = rules.shard_tree(cache0, cs)
    logits, new_cache = step(rules.shard_params(params, mesh), cache_s)
    res["kv_cache"] = {"logit_max_diff": float(jnp.max(jnp.abs(logits - ref_logits))),
                       "k_spec": [str(a) for a in cache_s.k[0].sharding.spec],
                       "k_shard": list(cache_s.k[0].addressable_shards[0].data.shape),
                       "k_shape": list(cache_s.k[0].shape)}


def group_checkpoint(res):
    from jaxrl_reason.train.checkpoint import Checkpointer

    batches = [toy_batch(seed=1), toy_batch(seed=2), toy_batch(seed=3)]

    def setup(shape):
        mesh, update, bs, _ = sharded_update(shape, batches[0])
        p, o = fresh_state(mesh)
        return mesh, p, o, update, bs

    d = tempfile.mkdtemp()
    mesh_a, p, o, upd_a, bs_a = setup((8, 1, 1))
    out = upd_a(p, o, rules.shard_tree(batches[0], bs_a))
    state = TrainState(jnp.asarray(1, jnp.int32), out.params, out.opt_state, jax.random.PRNGKey(3))
    saved_params = host(state.params)
    ck = Checkpointer(d)
    ck.save(state, {"data_position": 16})
    ck.close()
    # continue on the saving mesh
    cont_a = upd_a(state.params, state.opt_state, rules.shard_tree(batches[1], bs_a))
    metrics_a = {k: float(v) for k, v in cont_a.metrics.items()}
    # restore on a different mesh (structure + shardings come from a freshly initialised state there)
    mesh_b, pb, ob, upd_b, bs_b = setup((2, 2, 2))
    like = TrainState(jnp.zeros((), jnp.int32), pb, ob, jax.random.PRNGKey(0))
    ck = Checkpointer(d)
    restored, extra = ck.restore(like)
    ck.close()
    restored_diff = max_diff(host(restored.params), saved_params)
    restored_layout = layout_report(restored.params, mesh_b), layout_report(restored.opt_state, mesh_b)
    cont_b = upd_b(restored.params, restored.opt_state, rules.shard_tree(batches[1], bs_b))
    metrics_b = {k: float(v) for k, v in cont_b.metrics.items()}
    res["checkpoint"] = {
        "restored_param_max_diff": restored_diff,
        "restored_step": int(restored.step), "extra": extra,
        "restored_layout": restored_layout[0], "restored_opt_layout": restored_layout[1],
        "metrics_a": metrics_a, "metrics_b": metrics_b,
        "next_param_max_diff": max_diff(host(cont_a.params), host(cont_b.params))}


def group_loading(res):
    from jaxrl_reason.models.hf_port import save_pretrained

    model = init_model(CFG, seed=7)
    d = tempfile.mkdtemp()
    save_pretrained(model, d)
    mesh = make_mesh((1, 4, 2))
    loaded = rules.load_pretrained_sharded(d, mesh)
    state = nnx.state(loaded)
    fresh = rules.init_sharded(CFG, mesh, seed=7)
    res["loading"] = {"max_diff": max_diff(host(state), host(nnx.state(model))),
                      "layout": layout_report(state, mesh),
                      "init_layout": layout_report(nnx.state(fresh), mesh),
                      "init_max_diff": max_diff(host(nnx.state(fresh)), host(nnx.state(model)))}


def group_errors(res):
    errs = {}
    try:
        rules.init_sharded(CFG.replace(intermediate_size=60), make_mesh((1, 2, 4)), seed=0)
    except rules.ShardingError as e:
        errs["heads"] = str(e)
    try:
        rules.param_shardings(nnx.state(init_model(CFG.replace(intermediate_size=60), seed=0)), make_mesh((1, 1, 8)))
    except rules.ShardingError as e:
        errs["mlp"] = str(e)
    try:
        rules.batch_sharding(toy_batch(rows=12), make_mesh((8, 1, 1)))
    except rules.ShardingError as e:
        errs["batch"] = str(e)
    res["errors"] = errs


GROUPS = {"update": group_update, "memory": group_memory, "sampler": group_sampler, "checkpoint": group_checkpoint,
          "loading": group_loading, "errors": group_errors}

if __name__ == "__main__":
    assert jax.device_count() == 8, f"needs 8 devices (XLA_FLAGS), got {jax.device_count()}"
    out_path, names = sys.argv[1], sys.argv[2:] or list(GROUPS)
    res = {}
    for n in names:
        t0 = time.perf_counter()
        GROUPS[n](res)
        print(f"{n}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f)
