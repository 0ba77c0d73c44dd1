"""A LoRA policy's update on 8 fake CPU devices, run in a subprocess by tests/test_lora.py (XLA_FLAGS must be set
before JAX starts). Prints nothing; writes one JSON object of raw measurements, the assertions live in the test.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/lora_parallel_checks.py OUT.json
"""
from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from jaxrl_reason.models.lora import TRAINABLE, LoraConfig, attach_lora  # noqa: E402
from jaxrl_reason.models.qwen2 import init_model  # noqa: E402
from jaxrl_reason.parallel import rules  # noqa: E402
from jaxrl_reason.parallel.mesh import make_mesh  # noqa: E402
from jaxrl_reason.train.update import make_update, split_trainable, start_training  # noqa: E402

from parallel_checks import CFG, TERMS, host, max_diff, optimizer, run_steps, toy_batch  # noqa: E402

MESHES = {"8,1,1": (8, 1, 1), "2,2,2": (2, 2, 2), "1,4,2": (1, 4, 2)}
LORA = LoraConfig(rank=4, alpha=8.0)


def lora_model():
    return attach_lora(init_model(CFG, seed=0), LORA, seed=1)


def main(out_path):
    assert jax.device_count() == 8, f"needs 8 devices (XLA_FLAGS), got {jax.device_count()}"
    batches = [toy_batch(seed=s) for s in range(3)]
    graphdef, params = nnx.split(lora_model())
    start = host(params)
    opt = optimizer()
    update = make_update(graphdef, opt, TERMS, trainable=TRAINABLE)
    ref_params, _, ref_losses = run_steps(update, jax.tree.map(jnp.copy, params),
                                          opt.init(split_trainable(params, TRAINABLE)[0]), batches)
    ref_params = host(ref_params)
    res = {"reference_losses": [m["loss/pg"] for m in ref_losses],
           "param_moved": max_diff(ref_params, start)}
    for name, shape in MESHES.items():
        mesh = make_mesh(shape)
        tr = start_training(lora_model(), optimizer(), TERMS, mesh, trainable=TRAINABLE)
        adapters = split_trainable(tr.params, TRAINABLE)[0]
        is_spec = lambda x: isinstance(x, P)  # noqa: E731
        expected = [str(s) for s in jax.tree.leaves(rules.tree_specs(adapters, mesh), is_leaf=is_spec)]
        actual = [str(x.sharding.spec) for x in jax.tree.leaves(adapters)]
        split = [rules.shard_batch(b, mesh) for b in batches]
        p, o, losses = run_steps(tr.update, tr.params, tr.opt_state, split)
        p = host(p)
        base_moved = max_diff(split_trainable(p, TRAINABLE)[1], split_trainable(start, TRAINABLE)[1])
        res[name] = {"losses": [m["loss/pg"] for m in losses], "param_max_diff": max_diff(p, ref_params),
                     "base_moved": base_moved, "specs": actual, "expected_specs": expected}
    with open(out_path, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1])
