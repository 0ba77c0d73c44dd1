"""The Trainer and experiments/train.py on 8 fake CPU devices, run in a subprocess by tests/test_parallel_train.py
(XLA_FLAGS must be set before JAX starts). Writes one JSON object of raw measurements; the assertions live in the
test file.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/parallel_train_checks.py OUT.json [group ...]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import jax
import numpy as np
from flax import nnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from jaxrl_reason.data.arithmetic import arithmetic_examples  # noqa: E402
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig  # noqa: E402
from jaxrl_reason.parallel import rules  # noqa: E402
from jaxrl_reason.parallel.mesh import make_mesh  # noqa: E402
from jaxrl_reason.rewards.base import RewardResult  # noqa: E402
from jaxrl_reason.train.trainer import Trainer, TrainerConfig  # noqa: E402

from tiny import ARITH, arith_tokenizer, tiny_model  # noqa: E402

# Metrics that must agree between layouts: the sampled completions (rewards, lengths) and every loss statistic.
KEYS = ("reward/mean", "length/mean", "loss/pg", "loss/kl", "grad_norm", "update_norm", "solve/entropy",
        "solve/kl_ref", "solve/tokens", "logprob_gap/mean")


def reward_fn(texts, examples):
    """Deterministic in the text and split about evenly at this model size, so groups carry signal and the
    updates are not trivially zero (an untrained model's arithmetic is always wrong)."""
    del examples
    return RewardResult(np.array([float(len(t) % 2 == 0) for t in texts], np.float32), [{"n": len(t)} for t in texts])


def host(tree):
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), tree)


def max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def layout(tree):
    """{path: {"spec": [...], "shard": local shard shape, "mesh": {axis: size}}} of a sharded pytree."""
    out = {}
    for kp, x in jax.tree_util.tree_leaves_with_path(tree):
        out[rules.path_str(kp)] = {"spec": [str(a) for a in x.sharding.spec],
                                   "shard": list(x.addressable_shards[0].data.shape),
                                   "mesh": dict(getattr(x.sharding, "mesh", None).shape)
                                   if hasattr(x.sharding, "mesh") else None}
    return out


def make_trainer(tokenizer, workdir, mesh, steps):
    # 8 prompts x 2 samples: the prompt batch divides every mesh's batch shards (4 or 8), so no layout pads the
    # sampler's rows and the random draws line up row for row.
    model = tiny_model(tokenizer, seed=3)
    train = arithmetic_examples(64, seed=7, config=ARITH)
    cfg = TrainerConfig(steps=steps, prompts_per_step=8, samples_per_prompt=2, max_new_tokens=10, lr=1e-3,
                        temperature=1.0, checkpoint_every=1, progress=False, seed=11)
    return Trainer(model, tokenizer, GRPO("grpo", PolicyLossConfig(beta=0.05)), train, reward_fn, cfg, workdir,
                   mesh=mesh)


def scalars(history):
    return [{k: float(m[k]) for k in KEYS if k in m} for m in history]


def group_trainer(res, tokenizer):
    """One reference run without a mesh (3 steps). On (8, 1, 1): step 1, checkpointed. On (2, 2, 2): a new
    Trainer restores that checkpoint and trains steps 2 and 3. Every step must match the reference."""
    root = tempfile.mkdtemp()
    ref = make_trainer(tokenizer, os.path.join(root, "ref"), None, steps=3)
    ref_hist = ref.run()
    ref_params = host(ref.state.params)
    ref.close()

    a = make_trainer(tokenizer, os.path.join(root, "a"), make_mesh((8, 1, 1)), steps=3)
    a_hist = a.run(stop_after=1)
    saved = host(a.state.params)
    a_layout = layout(a.state.params)
    a.close()

    b = make_trainer(tokenizer, os.path.join(root, "a"), make_mesh((2, 2, 2)), steps=3)
    restored = {"step": int(b.state.step), "param_max_diff": max_diff(host(b.state.params), saved),
                "layout": layout(b.state.params), "opt_layout": layout(b.state.opt_state),
                "step_key_layout": layout({"step": b.state.step, "key": b.state.key})}
    b_hist = b.run()
    res["trainer"] = {
        "ref": scalars(ref_hist), "a": scalars(a_hist), "b": scalars(b_hist), "restored": restored,
        "a_layout": a_layout, "b_layout": layout(b.state.params),
        "model_layout": layout(nnx.state(b.model)),  # run() hands the trained params back to the module
        "param_max_diff": max_diff(host(b.state.params), ref_params),
        "param_moved": max_diff(ref_params, host(nnx.state(tiny_model(tokenizer, seed=3)))),
        "logged_steps": [json.loads(x)["step"] for x in open(os.path.join(root, "a", "logs", "metrics.jsonl"))]}
    b.close()


def group_train_script(res, tokenizer):
    """experiments/train.py's run() with config.parallel.mesh_shape set, end to end on (2, 2, 2)."""
    from jaxrl_reason.configs.tiny_default import get_config as tiny_default
    from jaxrl_reason.experiment.pipeline import run
    from jaxrl_reason.train import trainer as trainer_mod

    seen = {}
    close = trainer_mod.Trainer.close

    def spy_close(self):  # what the script's Trainer trained on, read just before it closes
        seen["mesh"] = None if self.mesh is None else dict(self.mesh.shape)
        seen["layout"] = layout(self.state.params)
        close(self)

    trainer_mod.Trainer.close = spy_close
    cfg = tiny_default()
    cfg.workdir = tempfile.mkdtemp()
    cfg.data.train_size, cfg.data.heldout_size = 300, 8
    cfg.data.min_operands = cfg.data.max_operands = 2
    cfg.model.hidden_size, cfg.model.num_hidden_layers, cfg.model.intermediate_size = 32, 2, 64
    cfg.tokenizer.vocab_size = 300
    cfg.sft.steps, cfg.sft.examples, cfg.sft.batch_size = 3, 100, 8
    cfg.sft.warmup_steps, cfg.sft.lr = 0, 1e-2  # big enough steps that 2 updates visibly lower the NLL
    cfg.rl.steps, cfg.rl.prompts_per_step, cfg.rl.samples_per_prompt, cfg.rl.max_new_tokens = 2, 4, 2, 16
    cfg.rl.eval_batch_size = 8
    cfg.rl.progress = False
    cfg.parallel.mesh_shape = {"data": 2, "fsdp": 2, "tp": 2}
    try:
        results = run(cfg)
    finally:
        trainer_mod.Trainer.close = close
    rows = [json.loads(x) for x in open(os.path.join(cfg.workdir, "logs", "metrics.jsonl"))]
    sft_rows = [json.loads(x) for x in open(os.path.join(cfg.workdir, "logs_sft", "metrics.jsonl"))]
    from jaxrl_reason.models.hf_port import load_pretrained

    final = load_pretrained(os.path.join(cfg.workdir, "final"))
    res["train_script"] = {
        "results": {k: results[k] for k in ("before", "after", "rl_steps") if k in results},
        "results_mesh": results.get("mesh"), "trainer_mesh": seen.get("mesh"), "layout": seen.get("layout"),
        "logged_steps": [r["step"] for r in rows], "sft_steps": [r["step"] for r in sft_rows],
        "sft_nll": [r["sft/nll"] for r in sft_rows],
        "final_hidden": final.config.hidden_size, "final_layers": final.config.num_hidden_layers}


def group_sampler(res, tokenizer):
    """Greedy samples on (8, 1, 1) — 3 prompts padded to 8 rows for the 8 batch shards — equal the unsharded
    ones, and the prefill hands back a KV cache laid out as `kv_cache_shardings` says on (2, 2, 2)."""
    import jax.numpy as jnp

    from jaxrl_reason.sampling.sampler import prefill, sample

    model = tiny_model(tokenizer, seed=5)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    kw = dict(max_new_tokens=6, temperature=0.0, num_samples=2)
    ref = sample(model, prompts, jax.random.PRNGKey(0), **kw)
    graphdef, params = nnx.split(model)
    mesh = make_mesh((8, 1, 1))
    out = sample(model, prompts, jax.random.PRNGKey(0), state=rules.shard_params(params, mesh), mesh=mesh, **kw)
    mesh = make_mesh((2, 2, 2))
    toks = jnp.asarray(np.arange(4 * 8).reshape(4, 8) % 200 + 3, jnp.int32)
    cache, _ = prefill(graphdef, rules.shard_params(params, mesh), toks, jnp.full((4,), 8, jnp.int32),
                       num_samples=2, max_new_tokens=8, mesh=mesh)
    res["sampler"] = {"reference": ref.tokens.tolist(), "mesh_8": out.tokens.tolist(),
                      "logprob_max_diff": float(np.max(np.abs(out.logprobs - ref.logprobs))),
                      "lengths": [ref.lengths.tolist(), out.lengths.tolist()],
                      "k_spec": [str(a) for a in cache.k[0].sharding.spec],
                      "k_shard": list(cache.k[0].addressable_shards[0].data.shape), "k_shape": list(cache.k[0].shape),
                      "valid_spec": [str(a) for a in cache.valid.sharding.spec]}


def group_verify_warmup(res, tokenizer):
    """The verification warm-up's training loop (`train_verdicts`, with solve rows) without a mesh and on
    (2, 2, 2): the same one set-up (`train.update.start_training`), so the same losses step by step."""
    from jaxrl_reason.inference.verifier import verify_rows
    from jaxrl_reason.train.verify_warmup import train_verdicts

    examples = arithmetic_examples(16, seed=9, config=ARITH)
    solutions = [e.solution if i % 2 else e.solution.replace("=", "= 1") for i, e in enumerate(examples)]
    rows = verify_rows(tokenizer, [e.question for e in examples], solutions, [bool(i % 2) for i in range(16)])
    out = {}
    for name, mesh in (("ref", None), ("mesh", make_mesh((2, 2, 2)))):
        model = tiny_model(tokenizer, seed=4)
        hist = train_verdicts(model, tokenizer, rows, examples, steps=3, batch_size=8, solve_batch_size=4, lr=1e-3,
                              warmup_steps=0, rng=np.random.default_rng(0), progress=False, mesh=mesh)
        out[name] = [[m["verify_warmup/nll"], m["verify_warmup/solve_nll"]] for m in hist]
        out[name + "_layout"] = layout(nnx.state(model))
    res["verify_warmup"] = out


GROUPS = {"trainer": group_trainer, "train_script": group_train_script, "sampler": group_sampler,
          "verify_warmup": group_verify_warmup}

if __name__ == "__main__":
    assert jax.device_count() == 8, f"needs 8 devices (XLA_FLAGS), got {jax.device_count()}"
    out_path, names = sys.argv[1], sys.argv[2:] or list(GROUPS)
    tok = arith_tokenizer(tempfile.mkdtemp())
    res = {}
    for n in names:
        t0 = time.perf_counter()
        GROUPS[n](res, tok)
        res.setdefault("seconds", {})[n] = time.perf_counter() - t0
        print(f"{n}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f)
