"""LoRA policies against full fine-tuning, measured in one process: the update's time, trainable parameters,
optimizer state and compiled memory, the KL reference's memory, and the sampler's decode with the adapters
merged once per call or run beside the weights at every token.

    python experiments/bench/lora.py                   # the CPU default's model (jaxrl_reason/configs/tiny_default.py)
    python experiments/bench/lora.py --size wide       # hidden 512, 4 layers, FFN 2048, vocab 4096

The update is GRPO's (policy term + KL, beta 0.04) on 64 rows (8 prompts x 8 samples) of 32 prompt + 64
completion tokens, the default run's shape; every projection adapted at rank 8, alpha 16; a third arm adds
adapter dropout (`--dropout`, a fresh key per update). Times: the median of
`--repeats` calls, the arms alternating, after one warm-up call each. Memory: XLA's memory analysis of the
compiled update (arguments, outputs, temporaries) and the bytes the KL reference adds beside the policy.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_reason.methods.grpo import PolicyLossConfig
from jaxrl_reason.models.lora import TRAINABLE, LoraConfig, attach_lora, base_state, count_params
from jaxrl_reason.models.qwen2 import ModelConfig, init_model
from jaxrl_reason.rl.batch import build_token_batch
from jaxrl_reason.sampling.sampler import sample
from jaxrl_reason.train.state import make_optimizer
from jaxrl_reason.train.update import split_trainable, start_training

SIZES = {
    "default": dict(vocab_size=384, hidden_size=96, intermediate_size=288, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    "wide": dict(vocab_size=4096, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True),
}
ROWS, PROMPT, NEW = 64, 32, 64


def nbytes(tree) -> int:
    return int(sum(x.nbytes for x in jax.tree.leaves(tree)))


def batch_of(vocab: int, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, vocab, PROMPT).tolist() for _ in range(ROWS // 8) for _ in range(8)]
    comps = [rng.integers(3, vocab, int(rng.integers(NEW // 2, NEW + 1))).tolist() for _ in range(ROWS)]
    adv = rng.normal(size=ROWS).astype(np.float32)
    old = [(-5.0 + 0.1 * rng.normal(size=len(c))).tolist() for c in comps]
    b = build_token_batch(prompts, comps, adv, old, "solve", length=PROMPT + NEW)
    return b._replace(ref_logprobs=np.asarray(b.old_logprobs))


def arm(cfg: ModelConfig, lora: LoraConfig):
    model = attach_lora(init_model(cfg, seed=0), lora, seed=1)
    terms = PolicyLossConfig(beta=0.04).terms(("solve",))
    opt = make_optimizer(1e-5, total_steps=100)
    tr = start_training(model, opt, terms, trainable=TRAINABLE if lora.enabled else None)
    batch = batch_of(cfg.vocab_size)
    drop = lora.dropout > 0  # the update's dropout masks come from a key per call
    key0 = jax.random.PRNGKey(0) if drop else None
    mem = tr.update.lower(tr.params, tr.opt_state, batch, None, key0).compile().memory_analysis()
    # The KL reference a trainer keeps: a frozen copy of the policy, or the LoRA policy's own base arrays.
    own = {id(x) for x in jax.tree.leaves(tr.params)}
    ref = base_state(tr.params) if lora.enabled else jax.tree.map(jnp.copy, tr.params)
    ref_extra = sum(x.nbytes for x in jax.tree.leaves(ref) if id(x) not in own)
    state = {"params": tr.params, "opt": tr.opt_state, "calls": 0}

    def step():
        state["calls"] += 1
        key = jax.random.fold_in(key0, state["calls"]) if drop else None
        out = tr.update(state["params"], state["opt"], batch, key=key)
        jax.block_until_ready(out.params)
        state["params"], state["opt"] = out.params, out.opt_state

    return {"model": model, "state": state, "step": step,
            "trainable_params": count_params(split_trainable(tr.params, TRAINABLE if lora.enabled else None)[0]),
            "all_params": count_params(tr.params), "opt_state_bytes": nbytes(tr.opt_state),
            "reference_extra_bytes": int(ref_extra),
            "compiled": {"argument_bytes": mem.argument_size_in_bytes, "output_bytes": mem.output_size_in_bytes,
                         "temp_bytes": mem.temp_size_in_bytes, "alias_bytes": mem.alias_size_in_bytes}}


def alternate(fns: dict, repeats: int) -> dict:
    for f in fns.values():
        f()  # compile / warm up
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dropout", type=float, default=0.1, help="the third arm's lora.dropout")
    args = ap.parse_args()
    cfg = ModelConfig(max_position_embeddings=512, rope_theta=10000.0, **SIZES[args.size])
    lora = LoraConfig(rank=args.rank, alpha=2.0 * args.rank)
    arms = {"full": arm(cfg, LoraConfig()), "lora": arm(cfg, lora),
            "lora_dropout": arm(cfg, dataclasses.replace(lora, dropout=args.dropout))}
    update_s = alternate({k: a["step"] for k, a in arms.items()}, args.repeats)

    # Decode: the same adapted policy, adapters merged once per call vs beside the weights at every token, and
    # the base without adapters (what a merged decode step costs).
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, cfg.vocab_size, PROMPT).tolist() for _ in range(ROWS // 8)]
    lm = arms["lora"]["model"]
    nnx.update(lm, arms["lora"]["state"]["params"])
    kw = dict(max_new_tokens=NEW, temperature=1.0, num_samples=8, pad_id=0)

    def sampler(lora_decode):
        def run():
            lm.config = lm.config.replace(lora_decode=lora_decode)
            jax.block_until_ready(sample(lm, prompts, jax.random.PRNGKey(0), **kw).tokens)
        return run

    base = init_model(cfg, seed=0)
    sample_s = alternate({"merged": sampler("merged"), "unmerged": sampler("unmerged"),
                          "base": lambda: sample(base, prompts, jax.random.PRNGKey(0), **kw)}, args.repeats)
    out = {"size": args.size, "config": SIZES[args.size], "rank": args.rank, "rows": ROWS,
           "tokens_per_row": PROMPT + NEW, "update_seconds": update_s, "sample_seconds": sample_s}
    for k, a in arms.items():
        out[k] = {f: a[f] for f in ("trainable_params", "all_params", "opt_state_bytes", "reference_extra_bytes",
                                    "compiled")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
