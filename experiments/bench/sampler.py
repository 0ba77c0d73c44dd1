"""Sampler throughput: jaxrl_reason's jitted sampler vs `transformers.generate` on the same checkpoint.

    python experiments/bench/sampler.py                       # both vocabularies, batch 16 and 64
    python experiments/bench/sampler.py --vocab small --batch 64 --no-hf
    python experiments/bench/sampler.py --vocab small --floor  # + this machine's floor for the workload

Model (fixed, as in the peers' scripts): hidden 256, 4 layers, 4 heads / 2 KV heads, FFN 1024, tied
embeddings, random weights saved by `transformers` and ported. Prompt 64 tokens, 128 new tokens,
temperature 1, no top-k/top-p, no early stop. Median of N timed runs after one warm-up; our compile time is
reported separately. torch runs on the same number of threads as the machine has cores. "decode ms/step" is
ours: (whole call - median prefill call) / new tokens, so it includes the per-call host work.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment.perf import sampler_floor, time_runs  # noqa: E402

ARCH = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=1024, max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-6)
VOCABS = {"small": 4096, "qwen": 151936}


def make_checkpoint(vocab: int, path: str):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=vocab, rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
                                   **ARCH)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    model.save_pretrained(path)
    return model


def bench_ours(path, batch, prompt_len, new_tokens, repeats):
    import jax

    import jax.numpy as jnp
    from flax import nnx

    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.sampling import sampler
    from jaxrl_reason.sampling.sampler import sample

    model = load_pretrained(path)
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, model.config.vocab_size, (batch, prompt_len)).tolist()
    key = jax.random.PRNGKey(0)

    def run():
        out = sample(model, prompts, key, max_new_tokens=new_tokens, temperature=1.0)
        assert out.lengths.min() == new_tokens
        return out

    t = time.perf_counter()
    run()
    first = time.perf_counter() - t
    med = time_runs(run, repeats)
    # The prefill alone, on the exact inputs sample() gives it (already compiled by the runs above).
    graphdef, state = nnx.split(model)
    tokens, lengths, _ = sampler.as_prompt_batch(prompts, 0, model.config.max_position_embeddings, new_tokens)
    tokens, lengths = jnp.asarray(tokens), jnp.asarray(lengths)
    prefill_s = time_runs(lambda: jax.block_until_ready(sampler.prefill(
        graphdef, state, tokens, lengths, num_samples=1, max_new_tokens=new_tokens)), repeats)
    return dict(median_s=med, compile_s=max(first - med, 0.0), prefill_s=prefill_s,
                decode_ms_per_step=(med - prefill_s) / new_tokens * 1e3)


def bench_hf(model, batch, prompt_len, new_tokens, repeats):
    import torch

    rng = np.random.default_rng(0)
    ids = torch.tensor(rng.integers(0, model.config.vocab_size, (batch, prompt_len)))
    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
        assert out.shape[1] == prompt_len + new_tokens

    run()
    return dict(median_s=time_runs(run, repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", choices=["small", "qwen", "both"], default="both")
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--floor", action="store_true",
                    help="also measure the machine's floor for the workload (its matmuls alone + one read of the "
                         "valid KV slots per step) and the largest ratio over transformers that floor allows")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    vocabs = ["small", "qwen"] if args.vocab == "both" else [args.vocab]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in vocabs:
            path = os.path.join(tmp, v)
            hf_model = make_checkpoint(VOCABS[v], path)
            for b in args.batch:
                new = b * args.new_tokens
                ours = bench_ours(path, b, args.prompt_len, args.new_tokens, args.repeats)
                row = dict(vocab=VOCABS[v], batch=b, ours_s=ours["median_s"], ours_tok_s=new / ours["median_s"],
                           ours_compile_s=ours["compile_s"], ours_prefill_s=ours["prefill_s"],
                           ours_decode_ms_per_step=ours["decode_ms_per_step"])
                if not args.no_hf:
                    hf = bench_hf(hf_model, b, args.prompt_len, args.new_tokens, args.repeats)
                    row.update(hf_s=hf["median_s"], hf_tok_s=new / hf["median_s"])
                    row["ratio"] = row["ours_tok_s"] / row["hf_tok_s"]
                if args.floor:
                    from jaxrl_reason.models.hf_port import load_pretrained

                    fl = sampler_floor(load_pretrained(path).config, b, args.prompt_len, args.new_tokens,
                                     args.repeats)
                    row.update({f"floor_{k}": x for k, x in fl.items()})
                    row["floor_tok_s"] = new / fl["floor_s"]
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(f"prompt {args.prompt_len} tokens, {args.new_tokens} new tokens, temperature 1, median of {args.repeats}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    print(f"{'vocab':>7} {'batch':>5} {'ours tok/s':>11} {'compile s':>9} {'prefill s':>9} {'decode ms/step':>14} "
          f"{'HF tok/s':>9} {'ours/HF':>8}")
    for r in rows:
        hf = f"{r['hf_tok_s']:9.0f} {r['ratio']:7.2f}x" if "hf_tok_s" in r else f"{'-':>9} {'-':>8}"
        print(f"{r['vocab']:>7} {r['batch']:>5} {r['ours_tok_s']:11.0f} {r['ours_compile_s']:9.1f} "
              f"{r['ours_prefill_s']:9.3f} {r['ours_decode_ms_per_step']:14.1f} {hf}")
    if args.floor:
        print("\nfloor: the workload's matmuls alone (XLA, this machine) + one read of the valid KV slots per step")
        print(f"{'vocab':>7} {'batch':>5} {'prefill mm s':>12} {'decode mm s':>11} {'KV read s':>9} {'GB/s':>5} "
              f"{'floor tok/s':>11} {'ours/floor':>10} {'floor/HF':>8}")
        for r in rows:
            cap = f"{r['floor_tok_s'] / r['hf_tok_s']:7.2f}x" if "hf_tok_s" in r else f"{'-':>8}"
            print(f"{r['vocab']:>7} {r['batch']:>5} {r['floor_prefill_mm_s']:12.3f} {r['floor_decode_mm_s']:11.3f} "
                  f"{r['floor_kv_read_s']:9.3f} {r['floor_mem_gb_s']:5.1f} {r['floor_tok_s']:11.0f} "
                  f"{r['ours_tok_s'] / r['floor_tok_s']:9.2f}  {cap}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
