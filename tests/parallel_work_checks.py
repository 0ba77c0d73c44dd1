"""What each device computes, as the compiler sees it: every executable of an RL step compiled for one device and
for 4 simulated CPU devices split over `data` and over `fsdp`, with the compiler's per-device FLOPs and
temporaries and the row dimension of the attention dots. Run in a subprocess by tests/test_parallel_work.py
(XLA_FLAGS must be set before JAX starts); prints one JSON object, the assertions live in the test file.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/parallel_work_checks.py OUT.json

Equal results on a mesh once hid that every device computed every row of the fused update; these numbers
cannot hide it. `cost_analysis()` counts a loop body once (the micro-batch and layer scans), so programs are
compared at the same micro-batch count, never across counts.
"""
from __future__ import annotations

import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jaxrl_reason.models.qwen2 import ModelConfig, attach_value_head, init_model  # noqa: E402
from jaxrl_reason.parallel import rules  # noqa: E402
from jaxrl_reason.parallel.mesh import batch_shards, make_mesh  # noqa: E402
from jaxrl_reason.rl.batch import build_token_batch, concat_batches, scored_size  # noqa: E402
from jaxrl_reason.rl.gae import VALUE_TASK, value_spec  # noqa: E402
from jaxrl_reason.rl.losses import kl_spec, pg_spec, sft_spec  # noqa: E402
from jaxrl_reason.rl import scoring  # noqa: E402
from jaxrl_reason.sampling import sampler  # noqa: E402
from jaxrl_reason.train.state import make_optimizer  # noqa: E402
from jaxrl_reason.train.update import VALUE_HEAD_RULES, make_sharded_update  # noqa: E402

CFG = ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False, rope_theta=10000.0)
MESHES = {"one": {"data": 1}, "data": {"data": 4}, "fsdp": {"fsdp": 4}}
# Rows of RL-like length, so that activations, not the (replicated under `data`) parameters and gradients,
# dominate the temporaries, as they do at real sizes.
ROWS, PROMPT, COMPLETION = 32, 64, 64
# An RL^V-like step: PPO-clip on solve rows, the verifier's SFT on verify rows, a KL to the reference.
TERMS = (pg_spec(("solve",)), sft_spec(("verify",), weight=0.5), kl_spec(("solve",), beta=0.01))
# PPO: the same plus the clipped value loss on value rows read from the value head.
PPO_TERMS = (pg_spec(("solve",)), value_spec())
RULES = tuple(rules.DEFAULT_RULES) + VALUE_HEAD_RULES
ATTENTION_DOT = re.compile(r"= \w+\[(\d+)[\d,]*\]\{[\d,]*\} dot\([^)]*\), lhs_batch_dims")


def report(compiled) -> dict:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    mem = compiled.memory_analysis()
    hlo = compiled.as_text()
    rows = [int(r) for r in ATTENTION_DOT.findall(hlo)]
    return {"flops": float(cost["flops"]), "temp": int(mem.temp_size_in_bytes),
            "output": int(mem.output_size_in_bytes), "argument": int(mem.argument_size_in_bytes),
            "attention_rows": max(rows) if rows else None, "all_gathers": hlo.count(" all-gather("),
            "all_reduces": hlo.count(" all-reduce(")}


def rl_batch(with_values: bool = False, seed: int = 0):
    rng = np.random.default_rng(seed)
    half = ROWS // 2
    prompts = [rng.integers(3, CFG.vocab_size, PROMPT - int(rng.integers(0, 4))).tolist() for _ in range(ROWS)]
    completions = [rng.integers(3, CFG.vocab_size, COMPLETION - int(rng.integers(0, 9))).tolist()
                   for _ in range(ROWS)]
    adv = rng.normal(size=ROWS).astype(np.float32)
    old = [(-6.0 + 0.1 * rng.normal(size=len(c))).tolist() for c in completions]
    kw = dict(length=PROMPT + COMPLETION)
    solve = build_token_batch(prompts[:half], completions[:half], adv[:half], old[:half], "solve", **kw)
    other_task = VALUE_TASK if with_values else "verify"
    other = build_token_batch(prompts[half:], completions[half:], adv[half:], old[half:], other_task, **kw)
    batch = concat_batches([solve, other])
    # Interleave the tasks so that every micro-batch and every device holds both.
    order = np.arange(ROWS).reshape(2, half).T.reshape(-1)
    batch = jax.tree.map(lambda x: None if x is None else np.asarray(x)[order], batch)
    if not with_values:
        batch = batch._replace(ref_logprobs=np.asarray(batch.old_logprobs) - 0.05)
    return batch


def abstract_state(model, mesh, opt=None):
    graphdef, params = nnx.split(model)
    ps = rules.tree_shardings(params, mesh, RULES)
    params = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), params, ps)
    if opt is None:
        return graphdef, params, None
    o = jax.eval_shape(opt.init, params)
    os_ = rules.tree_shardings(o, mesh, RULES)
    return graphdef, params, jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), o, os_)


def on_rows(x, mesh):
    spec = rules.batch_spec(np.ndim(x))
    return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=jax.sharding.NamedSharding(mesh, spec))


def update_report(mesh, micro_batches: int, ppo: bool = False) -> dict:
    model = init_model(CFG, seed=0)
    if ppo:
        model = attach_value_head(model)
    opt = make_optimizer(1e-3, total_steps=10)
    graphdef, params, opt_state = abstract_state(model, mesh, opt)
    batch = rl_batch(with_values=ppo)
    scored = scored_size(batch, micro_batches, batch_shards(mesh))
    sds = jax.tree.map(lambda x: on_rows(x, mesh), batch)
    update, *_ = make_sharded_update(graphdef, opt, PPO_TERMS if ppo else TERMS, mesh, params, opt_state, sds,
                                     rules=RULES, micro_batches=micro_batches)
    return report(update.lower(params, opt_state, sds, scored).compile())


def reference_report(mesh) -> dict:
    """The trainer's reference / pi_old scoring (`rl.scoring.reference_logprobs` on the mesh)."""
    graphdef, params, _ = abstract_state(init_model(CFG, seed=0), mesh)
    batch = jax.tree.map(lambda x: on_rows(x, mesh), rl_batch())
    fn = scoring.reference_scorer(graphdef, mesh)
    return report(fn.lower(params, batch, None).compile())


def verdict_report(mesh) -> dict:
    """The verifier's verdict scoring (`rl.scoring.token_logprobs_at_end`)."""
    graphdef, params, _ = abstract_state(init_model(CFG, seed=0), mesh)
    tokens = on_rows(np.zeros((ROWS, PROMPT + COMPLETION), np.int32), mesh)
    lengths = on_rows(np.full((ROWS,), PROMPT, np.int32), mesh)
    ids = jax.ShapeDtypeStruct((2,), jnp.int32, sharding=jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    with jax.set_mesh(mesh):
        return report(scoring._end_logprobs.lower(graphdef, params, tokens, lengths, ids).compile())


def sampler_reports(mesh) -> dict:
    """The sampler's prefill and its decode loop, as `sampling.sampler.sample` calls them."""
    model = init_model(CFG, seed=0)
    graphdef, params = nnx.split(model)
    params = rules.shard_params(params, mesh)
    prompts, samples, new = ROWS // 4, 4, COMPLETION
    tokens = np.full((prompts, PROMPT), 7, np.int32)
    lengths = np.full((prompts,), PROMPT, np.int32)
    placed = rules.shard_batch((tokens, lengths), mesh)
    with jax.set_mesh(mesh):
        kw = dict(num_samples=samples, max_new_tokens=new, mesh=mesh)
        pre = sampler.prefill.lower(graphdef, params, *placed, **kw).compile()
        cache, last = sampler.prefill(graphdef, params, *placed, **kw)
        carry = sampler.initial_carry(cache, last, lengths, prompts, samples, new, 0, jax.random.PRNGKey(0), mesh)
        rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        put = lambda x: jax.device_put(x, rep)  # noqa: E731
        stop = jnp.full((sampler.MAX_STOP_IDS,), -1, jnp.int32)
        args = (put(jnp.int32(new)), put(jnp.float32(1.0)), put(jnp.float32(1.0)), put(jnp.int32(0)), put(stop),
                put(jnp.int32(0)))
        dec = sampler.decode.lower(graphdef, params, carry, *args, mesh=mesh).compile()
    return {"prefill": report(pre), "decode": report(dec)}


def main(out_path: str) -> None:
    res = {}
    for name, shape in MESHES.items():
        mesh = make_mesh(shape, devices=jax.devices()[:int(np.prod(list(shape.values())))])
        res[name] = {"update_mb4": update_report(mesh, 4), "update_mb1": update_report(mesh, 1),
                     "ppo_update_mb2": update_report(mesh, 2, ppo=True), "reference": reference_report(mesh),
                     "verdict": verdict_report(mesh), **sampler_reports(mesh)}
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
