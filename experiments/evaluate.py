"""Evaluate a checkpoint with every test-time strategy from one pool of samples.

    python experiments/evaluate.py --model DIR [--tokenizer DIR] --data FILE.jsonl --n 16 \
        --max-new-tokens 1024 --out DIR [--judge DIR]

Samples N solutions per question once, scores them once with the model as its own RL^V verifier (and with
`--judge`, a second model used as LLM-as-a-judge), then reports pass@k, maj@k, BoN@k and weighted@k at
k = 1, 2, 4, ..., N with the tokens each spends. Writes to --out:
  results.json        every number (config, curves, token costs, verifier quality)
  results.md          the same as a table, one row per strategy, one column per k
  accuracy_vs_k.png   accuracy against k (log-2 axis), one line per strategy
  samples.jsonl       per question: completions, extracted answers, classes, correctness, scores

--data takes a local dataset file (.jsonl / .parquet / save_to_disk dir; see data.datasets.load_examples) or a
generator spec:
  arithmetic:COUNT[:SEED]              built-in arithmetic problems
  reasoning_gym:TASK:COUNT[:SEED]      a reasoning-gym task (offline)

The core is `jaxrl_reason.inference.test_time.evaluate(model, tokenizer, examples, n=..., ...)`, re-exported
here, so the trainer and benchmarks call the same code.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jaxrl_reason.cpu_malloc import reexec_with_huge_pages  # noqa: E402

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.inference.test_time import STRATEGY_LABELS, evaluate  # noqa: E402

__all__ = ["evaluate", "load_data", "markdown_table", "plot_curves", "write_outputs", "main"]


def load_data(spec: str, limit: Optional[int] = None) -> list:
    """Examples from a dataset path or a generator spec (see the module docstring); the first `limit` only."""
    from jaxrl_reason.data.datasets import load_examples

    head = spec.split(":", 1)[0]
    if head in ("arithmetic", "reasoning_gym") and not os.path.exists(spec):
        parts = spec.split(":")
        sizes = {"arithmetic": (2, 3), "reasoning_gym": (3, 4)}[head]
        numbers = parts[1:] if head == "arithmetic" else parts[2:]
        if len(parts) not in sizes or not all(x.strip().lstrip("-").isdigit() for x in numbers):
            raise ValueError(f"--data {spec!r}: expected arithmetic:COUNT[:SEED] or "
                             "reasoning_gym:TASK:COUNT[:SEED] with integer COUNT and SEED")
        count, seed = int(numbers[0]), int(numbers[1]) if len(numbers) == 2 else 0
        if head == "arithmetic":
            from jaxrl_reason.data.arithmetic import arithmetic_examples

            examples = arithmetic_examples(count, seed=seed)
        else:
            from jaxrl_reason.data.procedural import reasoning_gym_examples

            examples = reasoning_gym_examples(parts[1], count, seed=seed)
    else:
        if not os.path.exists(spec):
            raise FileNotFoundError(f"--data {spec!r}: no such file or directory, and not a generator spec "
                                    "(arithmetic:COUNT[:SEED], reasoning_gym:TASK:COUNT[:SEED])")
        examples = load_examples(spec)
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise ValueError(f"--data {spec!r} holds no examples")
    return examples


def markdown_table(results: dict) -> str:
    """One row per strategy (mean, ± std where the estimator has one), one column per k, then token costs."""
    ks = results["ks"]
    lines = [f"# Evaluation: {results['num_questions']} questions, N = {results['n']} samples each",
             "",
             f"Sample accuracy (pass@1): {results['sample_accuracy']:.4f}; mean completion tokens: "
             f"{results['mean_completion_tokens']:.1f}; no-answer rate: {results['no_answer_rate']:.3f}; "
             f"maj@k / weighted@k over up to {results['num_subsets']} random k-subsets per question "
             "(± is the std of one k-sample run's dataset accuracy).",
             "",
             "| strategy | " + " | ".join(f"k={k}" for k in ks) + " |",
             "|---|" + "---|" * len(ks)]
    for name, curve in results["strategies"].items():
        cells = []
        for j, m in enumerate(curve["mean"]):
            std = curve["std"][j] if curve["std"] is not None else None
            cells.append(f"{m:.4f}" + (f" ± {std:.4f}" if std is not None else ""))
        lines.append(f"| {STRATEGY_LABELS.get(name, name)} | " + " | ".join(cells) + " |")
    tokens = results["tokens_per_question"]
    lines.append("| tokens generated / question | " + " | ".join(f"{t:.0f}" for t in tokens["generated"]) + " |")
    lines.append("| verifier prompt tokens / question | "
                 + " | ".join(f"{t:.0f}" for t in tokens["verifier_prompt"]) + " |")
    lines += ["", "## Verifier quality", "", "| verifier | mean score (correct) | mean score (wrong) | AUROC | "
              "AUROC within a question | balanced acc. @0.5 |", "|---|---|---|---|---|---|"]
    fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
    for name, q in results["verifier"].items():
        lines.append(f"| {name} | {fmt(q['mean_score_correct'])} | {fmt(q['mean_score_wrong'])} | "
                     f"{fmt(q['auroc'])} | {fmt(q['within_question_auroc'])} ({q['mixed_questions']} questions) | "
                     f"{fmt(q['balanced_accuracy'])} |")
    n = results["n"]
    lines += ["", f"## Weighted vote against the majority over all {n} samples (`vote_headroom`)", "",
              f"| verifier | maj@{n} wrong | of them with a right sample | top wrong answer's share | right share | "
              "score ratio needed | score ratio given | weighted rescues | weighted breaks |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, h in results["vote_headroom"].items():
        lines.append(f"| {name} | {h['majority_wrong']:.1f} of {h['questions']} | {h['solvable']} | "
                     f"{fmt(h['top_wrong_share'])} | {fmt(h['right_share'])} | {fmt(h['needed_ratio'])} | "
                     f"{fmt(h['score_ratio'])} | {h['rescued']:.1f} | {h['broken']:.1f} |")
    chance = results.get("best_of_n_chance")
    if chance is not None:
        # best_of_n_chance is over all n samples: compare with Best-of-k only at k = n, which --ks may leave out
        at_n = results["ks"].index(n) if n in results["ks"] else None
        bon = {name: results["strategies"][key]["mean"][at_n] for name, key in (("self", "best_of_n"),
               ("judge", "best_of_n_judge")) if key in results["strategies"] and at_n is not None}
        lines += ["", f"## Best-of-{n} against a verifier that reads nothing (`best_of_n_chance`)", "",
                  f"A verifier that scores each distinct completion at random picks a right one with probability "
                  f"(distinct right completions) / (distinct completions): Best-of-{n} "
                  f"{fmt(chance['accuracy'])} here, against pass@1 {fmt(results['sample_accuracy'])}. On the "
                  f"{chance['mixed_questions']} questions with right and wrong samples, "
                  f"{fmt(chance['mixed_right_share'])} of samples but {fmt(chance['mixed_distinct_right_share'])} "
                  f"of distinct completions are right." + ("" if at_n is not None else
                  f" (k = {n} is not among the evaluated ks, so no verifier's Best-of-{n} to set beside it.)")]
        if bon:
            lines += ["", f"| verifier | Best-of-{n} | reading nothing | above it |", "|---|---|---|---|"]
        for name, value in bon.items():
            lines.append(f"| {name} | {fmt(value)} | {fmt(chance['accuracy'])} | "
                         f"{'yes' if value > chance['accuracy'] else 'no'} |")
    return "\n".join(lines) + "\n"


def plot_curves(results: dict, path: str | os.PathLike) -> None:
    """Accuracy against k on a log-2 axis, one line per strategy (bands: ± std where available)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ks = np.asarray(results["ks"])
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, curve in results["strategies"].items():
        mean = np.asarray(curve["mean"])
        line, = ax.plot(ks, mean, marker="o", label=STRATEGY_LABELS.get(name, name))
        if curve["std"] is not None:
            std = np.asarray(curve["std"])
            ax.fill_between(ks, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    top = max(max(c["mean"]) for c in results["strategies"].values())
    ax.set_ylim(0.0, min(1.0, top + 0.05) if top > 0 else 0.05)
    ax.set_xlabel("number of samples k")
    ax.set_ylabel("accuracy")
    ax.set_title(f"{results['num_questions']} questions, N = {results['n']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(results: dict, out_dir: str | os.PathLike) -> dict:
    """results.json (without samples), samples.jsonl, results.md, accuracy_vs_k.png; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "md": out / "results.md", "png": out / "accuracy_vs_k.png",
             "samples": out / "samples.jsonl"}
    summary = {k: v for k, v in results.items() if k != "samples"}
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with open(paths["samples"], "w", encoding="utf-8") as f:
        for row in results.get("samples", []):
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    paths["md"].write_text(markdown_table(results), encoding="utf-8")
    plot_curves(results, paths["png"])
    return paths


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (Hugging Face layout: config.json + "
                                                   "safetensors); our checkpoints are saved in it too")
    p.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    p.add_argument("--data", required=True, help="dataset file/dir or generator spec (arithmetic:COUNT[:SEED], "
                                                 "reasoning_gym:TASK:COUNT[:SEED])")
    p.add_argument("--limit", type=int, help="evaluate only the first LIMIT questions")
    p.add_argument("--n", type=int, default=16, help="samples per question (default 16)")
    p.add_argument("--ks", help="comma-separated k values (default 1,2,4,...,N)")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-subsets", type=int, default=1000, help="random k-subsets for maj@k / weighted@k")
    p.add_argument("--normalize", action="store_true",
                   help="score = P(Yes)/(P(Yes)+P(No)) instead of P(Yes)")
    p.add_argument("--judge", help="second model directory, used as an LLM-as-a-judge verifier")
    p.add_argument("--judge-tokenizer", help="tokenizer of --judge (default: --judge)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    p.add_argument("--batch-size", type=int, default=8, help="questions per sampler call")
    p.add_argument("--score-batch-size", type=int, default=32, help="rows per verifier prefill")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--correction-rounds", type=int, default=0,
                   help="CIPO self-correction rounds on the model's own greedy attempts: the share of wrong attempts "
                        "fixed and right ones broken per round, with tokens (0 = off)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = _parser().parse_args(argv)
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    if args.n < 1:
        raise SystemExit(f"--n must be >= 1, got {args.n}")
    if args.correction_rounds < 0:
        raise SystemExit(f"--correction-rounds must be >= 0, got {args.correction_rounds}")
    ks = None
    if args.ks:
        try:
            ks = [int(k) for k in args.ks.split(",") if k.strip()]
        except ValueError:
            raise SystemExit(f"--ks must be comma-separated integers, got {args.ks!r}") from None
    start = time.time()
    examples = load_data(args.data, args.limit)
    model = load_pretrained(args.model, args.dtype)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer or args.model)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise SystemExit(f"tokenizer {args.tokenizer or args.model} has {tokenizer.vocab_size} ids but the model's "
                         f"embedding has {model.config.vocab_size} rows; pass the model's own --tokenizer")
    judge = None
    if args.judge:
        judge = (load_pretrained(args.judge, args.dtype),
                 Tokenizer.from_pretrained(args.judge_tokenizer or args.judge))
    results = evaluate(model, tokenizer, examples, n=args.n, max_new_tokens=args.max_new_tokens, seed=args.seed,
                       temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, ks=ks,
                       num_subsets=args.num_subsets, normalize=args.normalize, judge=judge,
                       prompt_batch_size=args.batch_size, score_batch_size=args.score_batch_size,
                       progress=not args.no_progress)
    if args.correction_rounds:
        from jaxrl_reason.inference.correction import evaluate_correction

        results["correction"] = evaluate_correction(model, tokenizer, examples, rounds=args.correction_rounds,
                                                    max_new_tokens=args.max_new_tokens, seed=args.seed,
                                                    batch_size=args.batch_size)
    results["config"].update({"model": args.model, "tokenizer": args.tokenizer or args.model, "data": args.data,
                              "judge": args.judge, "dtype": args.dtype, "wall_seconds": time.time() - start})
    paths = write_outputs(results, args.out)
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


if __name__ == "__main__":
    main()
