"""Multi-turn rollout throughput: continuing each conversation from its KV cache vs re-prefilling the whole
conversation every turn, in one process, on the same model, prompts and key (both sample the same tokens:
tests/test_rollout.py), so the work compared is identical and the ratio is the cache's saving.

    python experiments/bench/multiturn.py [--rows 8 --samples 4 --prompt 256 --turns 4 --turn-tokens 32]

Model: the benchmarks' random-weight Qwen2 (hidden 256, 4 layers, 4 / 2 heads, FFN 1024) over a 300-token BPE
trained on the arithmetic task. The environment answers every turn that ends at a "call" delimiter (a digit or a
space, which a random model writes often) with a fixed 24-token-budget observation, so turns are many and
deterministic. After one warm-up call per mode (which compiles its shapes), `--repeats` timed calls alternating between the
modes; medians and the ratio of each alternating pair.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time

import numpy as np

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.experiment.perf import bench_model  # noqa: E402


class ScriptedEnv:
    stop_strings = tuple("0123456789") + (" ",)

    def __init__(self, prompt_words: int):
        self.calls, self.results, self.words = [], [], prompt_words

    def reset(self, example):
        return " ".join(["Use the tools to compute the value exactly."] * self.words) + " " + example.question

    def step(self, text):
        from jaxrl_reason.rollout import Step, ToolResult
        self.calls.append(text)
        self.results.append(ToolResult("= 12345", True))
        return Step("= 12345", False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8, help="questions per call")
    ap.add_argument("--samples", type=int, default=4, help="conversations per question")
    ap.add_argument("--prompt-words", type=int, default=24, help="repeats of an 8-word instruction in the prompt")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=32)
    ap.add_argument("--budget", type=int, default=512, help="total tokens after the prompt")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import jax

    from jaxrl_reason.data.arithmetic import ArithmeticConfig, arithmetic_examples
    from jaxrl_reason.data.prompts import solve_prompt
    from jaxrl_reason.data.tokenizer_training import train_tiny_tokenizer
    from jaxrl_reason.rollout import ToolConfig, multi_turn_sample

    corpus = arithmetic_examples(400, seed=1, config=ArithmeticConfig(max_digits=6))
    tok = train_tiny_tokenizer([solve_prompt(e.question) for e in corpus] + [e.solution for e in corpus],
                               tempfile.mkdtemp(), vocab_size=300)
    model = bench_model(tok.vocab_size)
    examples = arithmetic_examples(args.rows, seed=0, config=ArithmeticConfig(max_digits=6))
    env = lambda: ScriptedEnv(args.prompt_words)  # noqa: E731
    results, runs, outs = {}, {}, {}
    for mode, cont in (("kv_cache", True), ("re_prefill", False)):
        cfg = ToolConfig(tools=("calculator",), max_turns=args.turns, max_turn_tokens=args.turn_tokens,
                         max_obs_tokens=24, continue_from_cache=cont, chunk_steps=8)
        runs[mode] = functools.partial(multi_turn_sample, model, tok, examples, env, jax.random.PRNGKey(0),
                                       config=cfg, max_tokens=args.budget, num_samples=args.samples,
                                       temperature=1.0)
        t0 = time.perf_counter()
        outs[mode] = runs[mode]()  # compiles every shape of this mode
        results[mode] = dict(first_call_s=time.perf_counter() - t0, seconds=[])
    # Timed calls alternate between the modes, so a change of the machine's load hits both alike.
    for _ in range(args.repeats):
        for mode in runs:
            t0 = time.perf_counter()
            runs[mode]()
            results[mode]["seconds"].append(time.perf_counter() - t0)
    for mode, out in outs.items():
        r = results[mode]
        r["all_seconds"], r["seconds"] = r["seconds"], statistics.median(r["seconds"])
        model_tokens = int(sum(m.sum() for m in out.model_mask))
        r.update(model_tokens=model_tokens, env_tokens=int(sum(len(c) for c in out.completions)) - model_tokens,
                 turns_mean=float(np.mean([len(t) for t in out.turns])),
                 prompt_tokens=int(np.mean([len(p) for p in out.prompts])), tokens_per_s=model_tokens / r["seconds"],
                 completions=out.completions)
    pair = [b / a for a, b in zip(results["kv_cache"]["all_seconds"], results["re_prefill"]["all_seconds"])]
    same = results["kv_cache"].pop("completions") == results["re_prefill"].pop("completions")
    print(json.dumps({"args": vars(args), "same_tokens": same, **results}, indent=1))
    print("| mode | model tok/s | s per call | turns/row | model / env tokens |")
    for mode, r in results.items():
        print(f"| {mode} | {r['tokens_per_s']:.0f} | {r['seconds']:.2f} | {r['turns_mean']:.2f} | "
              f"{r['model_tokens']} / {r['env_tokens']} |")
    print(f"ratio kv_cache / re_prefill tokens/s: {results['kv_cache']['tokens_per_s'] / results['re_prefill']['tokens_per_s']:.2f}x "
          f"(medians); per alternating pair: {', '.join(f'{x:.2f}x' for x in pair)}")


if __name__ == "__main__":
    main()
