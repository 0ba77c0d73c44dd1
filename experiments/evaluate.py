"""Evaluate a checkpoint with every test-time strategy from one pool of samples.

    python experiments/evaluate.py --model DIR [--tokenizer DIR] --data FILE.jsonl --n 16 \
        --max-new-tokens 1024 --out DIR [--judge DIR]

Samples N solutions per question once, scores them once with the model as its own RL^V verifier (and with
`--judge`, a second model used as LLM-as-a-judge), then reports pass@k, maj@k, BoN@k and weighted@k at
k = 1, 2, 4, ..., N with the tokens each spends. Writes to --out:
  results.json        every number (config, curves, token costs, verifier quality)
  results.md          the same as a table, one row per strategy, one column per k
  accuracy_vs_k.png   accuracy against k and against tokens generated per question, one line per strategy
  samples.jsonl       per question: completions, extracted answers, classes, correctness, scores

Strategies that spend tokens differently each take a flag and add a section of rows {..., acc, tokens} (tokens:
mean generated per question, cumulative over rounds) to the same JSON, table and plot:
  --refine-rounds R                CURE self-refinement from each question's first pool sample: per-round
                                   accuracy, tokens, verdict P/R/F1 (wrong = positive), well-formed critiques,
                                   majority voting at the same tokens (--critique-format worked_check: the
                                   critique opens with the task's check)
  --length-budgets B1,B2 --tau T   confidence-based length selection (fresh N samples per budget)
  --budget-forcing K1,K2           budget forcing at total budgets K (buffer --forcing-buffer)
  --correction-rounds R            CIPO self-correction of the model's own greedy attempts: per-round accuracy,
                                   fix / break rates, tokens (--correction-format worked_check: the correction
                                   opens with the task's check of the attempt)
  --debug-bench SPEC               DebugBench-style repair: each problem's buggy program is the attempt, the
                                   fixes run in the code sandbox (R = --correction-rounds, at least 1); SPEC is
                                   generated:COUNT[:SEED] (function tasks broken by one AST mutation, checked to
                                   fail) or a JSONL of buggy_code + tests records. Alone, without --data, it is
                                   the whole evaluation (a code model needs no math pool).

--data takes a local dataset file (.jsonl / .parquet / save_to_disk dir; see data.datasets.load_examples) or a
generator spec:
  arithmetic:COUNT[:SEED]              built-in arithmetic problems
  reasoning_gym:TASK:COUNT[:SEED]      a reasoning-gym task (offline)
Answers are graded by what the examples are (`--grader auto`, from each example's meta source): a testbed task's
exact checker (a run's own heldout.jsonl, e.g. runs/testbed_latin/heldout.jsonl), reasoning-gym's scorer, else the
math grader (`--answer-extraction`); `--grader NAME` forces one.

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

from jaxrl_reason.data.prompts import CORRECTION_FORMATS, CRITIQUE_FORMATS, GUIDED_LAYOUTS  # noqa: E402
from jaxrl_reason.data.testbed import TASK_MODULES as TESTBED_TASKS  # noqa: E402
from jaxrl_reason.inference.test_time import STRATEGY_LABELS, evaluate  # noqa: E402

__all__ = ["answer_reward", "evaluate", "example_grader", "example_reward", "load_data", "load_debug_bench",
           "markdown_table", "plot_curves", "strategy_curves", "write_outputs", "main"]


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


def load_debug_bench(spec: str, limit: Optional[int] = None) -> list:
    """Buggy programs to repair: `generated:COUNT[:SEED]` (function tasks, one AST mutant each that the sandbox
    saw fail; a task without a failing mutant is skipped) or a JSONL path of DebugBench-style records."""
    from jaxrl_reason.data import code_datasets as cd

    if spec.startswith("generated:") and not os.path.exists(spec):
        parts = spec.split(":")[1:]
        try:
            count, seed = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
            if len(parts) > 2 or count < 1:
                raise ValueError
        except (ValueError, IndexError):
            raise SystemExit(f"--debug-bench {spec!r}: use generated:COUNT[:SEED] with COUNT >= 1") from None
        problems = cd.make_correction_problems(cd.generate_function_tasks(count, seed=seed), seed=seed)
    elif os.path.exists(spec):
        problems = cd.load_correction_jsonl(spec)
    else:
        raise SystemExit(f"--debug-bench {spec!r}: no such file; give a JSONL of buggy_code + tests records or "
                         "generated:COUNT[:SEED]")
    problems = problems[:limit] if limit else problems
    if not problems:
        raise SystemExit(f"--debug-bench {spec!r} holds no buggy program")
    return problems


def markdown_table(results: dict) -> str:
    """One row per strategy (mean, ± std where the estimator has one), one column per k, then token costs; then
    a section per token-spending strategy present. Without a sample pool (--debug-bench alone) only the latter."""
    if "strategies" not in results:
        return "\n".join(["# Evaluation"] + _strategy_sections(results)) + "\n"
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
    lines += _strategy_sections(results)
    return "\n".join(lines) + "\n"


def _strategy_sections(results: dict) -> list:
    """Markdown for the token-spending strategies present in `results` (refinement, length selection, forcing)."""
    from jaxrl_reason.experiment.plots import format_table

    lines = []
    if "refinement" in results:
        r = results["refinement"]
        verdict_cols = ["verdict_precision", "verdict_recall", "verdict_f1", "verdict_f1_strict", "verdict_parsed",
                        "well_formed", "critiqued"]
        rows = [dict(row, **{k: row.get(k, "") for k in verdict_cols}) for row in r["rows"]]
        cols = ["round", "acc", "tokens"] + verdict_cols
        if "majority_same_tokens" in rows[0]:
            cols += ["majority_same_tokens", "majority_k", "majority_capped"]
        v = r["verdict"]
        lines += ["", f"## Self-refinement ({r['config']['rounds']} rounds, verdict generated; round 0 = "
                      f"{r['config']['round0']})", "",
                  "tokens: generated per question up to and including the round (critiques and re-solves); "
                  "verdict scores: wrong solution = positive, an unparsed verdict counts as claiming an error "
                  "(strict F1: as the wrong call); majority_same_tokens: maj@k over the pool at the same tokens "
                  "(k = majority_k, interpolated).", "", format_table(rows, cols), "",
                  f"Pooled verdicts: precision {v['precision']:.3f}, recall {v['recall']:.3f}, F1 {v['f1']:.3f} "
                  f"(strict {r['verdict_strict']['f1']:.3f}) over {v['critiqued']} critiques; "
                  f"{r['verdict_parsed']:.3f} with a parsed verdict, {r['well_formed']:.3f} well-formed; "
                  f"{r['settled']:.3f} of questions settled by a no-error verdict."]
    if "length_selection" in results:
        ls = results["length_selection"]
        sel = ls["selection"]
        lines += ["", f"## Confidence-based length selection (tau = {sel['tau']})", "",
                  "Each budget alone (fresh samples; acc = weighted@N):", "",
                  format_table(ls["rows"], ["budget", "acc", "majority", "tokens"]), "",
                  f"Selection: accuracy {sel['acc']:.4f} at {sel['tokens']:.0f} tokens per question (every budget "
                  f"tried up to the chosen one); tau reached on {sel['reached']:.3f} of questions; chosen "
                  f"budgets {sel['chosen']}."]
    if "budget_forcing" in results:
        bf = results["budget_forcing"]
        lines += ["", f"## Budget forcing (buffer {bf['config']['buffer']}, N = {bf['config']['n']})", "",
                  format_table(bf["rows"], ["budget", "acc", "majority", "weighted", "tokens", "forced"])]
    cols = ["round", "acc", "fix_rate", "break_rate", "tokens"]
    if "correction" in results:
        lines += ["", "## Self-correction of its own greedy attempts (CIPO)", "",
                  "Round 0: the model's own attempts (tokens: what solving cost); round t: each standing attempt "
                  "corrected once more, right or not. fix_rate / break_rate: the share of round t - 1's wrong "
                  "attempts made right / right attempts made wrong; tokens: generated per question, cumulative.", "",
                  format_table(results["correction"]["rows"], cols)]
    if "debug_bench" in results:
        db = results["debug_bench"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(db["bug_kinds"].items(), key=lambda kv: -kv[1]))
        lines += ["", f"## DebugBench-style repair ({db['problems']} buggy programs, fixes run in the sandbox)", "",
                  f"Round 0: the given buggy programs (all failing). Bug kinds: {kinds}.", "",
                  format_table(db["rows"], cols)]
    return lines


def strategy_curves(results: dict) -> dict:
    """{name: [{"k"?, "tokens", "acc", "lo"?, "hi"?}]} for `plots.test_time_curves`: every vote at every k (± its
    std), and the token-spending strategies present (refinement rounds, length budgets, forced budgets)."""
    mean_len = results.get("mean_completion_tokens", 0.0)
    curves = {}
    for name, c in results.get("strategies", {}).items():
        pts = []
        for j, k in enumerate(results["ks"]):
            p = {"k": k, "tokens": k * mean_len, "acc": c["mean"][j]}
            if c["std"] is not None:
                p.update(lo=c["mean"][j] - c["std"][j], hi=c["mean"][j] + c["std"][j])
            pts.append(p)
        curves[STRATEGY_LABELS.get(name, name)] = pts
    if "refinement" in results:
        curves["self-refinement"] = [{"k": r["round"] + 1, "tokens": r["tokens"], "acc": r["acc"]}
                                     for r in results["refinement"]["rows"]]
    if "length_selection" in results:
        sel = results["length_selection"]["selection"]
        curves[f"length selection (tau={sel['tau']})"] = [{"tokens": sel["tokens"], "acc": sel["acc"]}]
        curves["weighted@N per budget"] = [{"tokens": r["tokens"], "acc": r["acc"]}
                                           for r in results["length_selection"]["rows"]]
    if "budget_forcing" in results:
        curves["budget forcing (maj@N)"] = [{"tokens": r["tokens"], "acc": r["majority"]}
                                            for r in results["budget_forcing"]["rows"]]
    for key, label in (("correction", "self-correction"), ("debug_bench", "DebugBench repair")):
        if key in results:
            curves[label] = [{"tokens": r["tokens"], "acc": r["acc"]} for r in results[key]["rows"]]
    return {name: [p for p in pts if p["tokens"] > 0] for name, pts in curves.items()}


def plot_curves(results: dict, path: str | os.PathLike) -> None:
    """Two panels through `experiment.plots.test_time_curves`: the votes against k, and every strategy against
    tokens generated per question (bands: ± std where the estimator has one)."""
    from matplotlib.figure import Figure

    from jaxrl_reason.experiment.plots import test_time_curves

    curves = strategy_curves(results)
    by_k = {name: pts for name, pts in curves.items() if pts and all("k" in p for p in pts)
            and name != "self-refinement"}
    fig = Figure(figsize=(12 if by_k else 6, 4.4), layout="constrained")
    axes = fig.subplots(1, 2 if by_k else 1)
    left, right = axes if by_k else (None, axes)
    if by_k:
        title = f"{results['num_questions']} questions, N = {results['n']}"
        test_time_curves(by_k, x="k", ax=left, title=title)
    test_time_curves({n: p for n, p in curves.items() if p}, x="tokens", ax=right,
                     title="accuracy per token generated")
    fig.savefig(path, dpi=120)


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


def answer_reward(extraction: str = "boxed"):
    """(completions, examples) -> RewardResult: `test_time.default_reward` with the answer `extraction` (boxed: the
    last \\boxed{}; boxed_or_last_number: else the last number written, the GSM8K "flexible" grading)."""
    import functools

    from jaxrl_reason.inference.test_time import default_reward
    from jaxrl_reason.rewards.math import ANSWER_EXTRACTIONS

    if extraction not in ANSWER_EXTRACTIONS:
        raise SystemExit(f"--answer-extraction must be one of {ANSWER_EXTRACTIONS}, got {extraction!r}")
    return functools.partial(default_reward, extraction=extraction)


GRADERS = ("auto", "math", "reasoning_gym", *TESTBED_TASKS)


def example_grader(examples: Sequence, grader: str = "auto") -> str:
    """The name of what grades `examples`: `grader` itself, or with "auto" the examples' own `meta["source"]` --
    a testbed task (a run's heldout.jsonl keeps the source), reasoning_gym, else math. Pools of code problems are
    refused: they are graded in the sandbox by `--debug-bench` or the trainer, not by an answer grader."""
    if grader not in GRADERS:
        raise SystemExit(f"--grader must be one of {' | '.join(GRADERS)}, got {grader!r}")
    if any("tests" in (e.meta or {}) for e in examples):
        raise SystemExit("--data holds code problems (meta.tests); a pool of programs is not graded by an answer "
                         "grader here: use --debug-bench for repair, or the trainer's held-out evaluation")
    if grader != "auto":
        return grader
    sources = {(e.meta or {}).get("source") for e in examples}
    known = sources & {"reasoning_gym", *TESTBED_TASKS}
    if len(known) > 1 or (known and len(sources) > 1):
        raise SystemExit(f"--data mixes sources {sorted(map(str, sources))}; evaluate one task at a time or name "
                         "the grader with --grader")
    return known.pop() if known else "math"


def example_reward(grader: str, extraction: str = "boxed"):
    """(completions, examples) -> RewardResult for a grader named by `example_grader`: a testbed task's exact
    checker, reasoning-gym's scorer, or the math answer grader with `extraction`."""
    import functools

    if grader == "math":
        return answer_reward(extraction)
    if grader == "reasoning_gym":
        from jaxrl_reason.data.procedural import reasoning_gym_reward

        return reasoning_gym_reward
    from jaxrl_reason.data import testbed

    return functools.partial(testbed.reward, testbed.task_of(grader))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (Hugging Face layout: config.json + "
                                                   "safetensors); our checkpoints are saved in it too")
    p.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    p.add_argument("--data", help="dataset file/dir or generator spec (arithmetic:COUNT[:SEED], "
                                  "reasoning_gym:TASK:COUNT[:SEED]); optional with --debug-bench")
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
    p.add_argument("--answer-extraction", default="boxed",
                   help="boxed (strict: the last \\boxed{}) or boxed_or_last_number (else the last number written)")
    p.add_argument("--grader", default="auto", choices=GRADERS,
                   help="what grades an answer: auto (from each example's meta source: a testbed task's checker, "
                        "reasoning-gym's scorer, else math) or one named")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    p.add_argument("--batch-size", type=int, default=8, help="questions per sampler call")
    p.add_argument("--score-batch-size", type=int, default=32, help="rows per verifier prefill")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--check-tokens", type=int, default=0,
                   help="the model as its own verifier first writes a worked check of at most this many tokens "
                        "(greedy) and its verdict is read after it: models trained with data.verify_format="
                        "worked_check or mark_check (default 0: the verdict right after the verify prompt)")
    p.add_argument("--correction-rounds", type=int, default=0,
                   help="CIPO self-correction rounds on the model's own greedy attempts: the share of wrong attempts "
                        "fixed and right ones broken per round, with tokens (0 = off); also --debug-bench's rounds")
    p.add_argument("--correction-format", default="solution", choices=CORRECTION_FORMATS,
                   help="what the correction prompt asks for: solution (the paper's) | worked_check (the task's check "
                        "of the attempt first; give --correction-max-new-tokens room for it); a run's "
                        "data.correction_format")
    p.add_argument("--correction-max-new-tokens", type=int,
                   help="budget of a correction (default: --max-new-tokens)")
    p.add_argument("--debug-bench", metavar="SPEC",
                   help="DebugBench-style repair of buggy programs, checked in the code sandbox: "
                        "generated:COUNT[:SEED] (function tasks with one AST mutation each) or a JSONL of "
                        "buggy_code + tests records")
    p.add_argument("--refine-rounds", type=int, default=0,
                   help="CURE self-refinement rounds (critique, then re-solve from the hint unless the verdict says "
                        "no error) from each question's first pool sample (0 = off)")
    p.add_argument("--refine-temperature", type=float,
                   help="sampling temperature of the critiques and re-solves (default: --temperature)")
    p.add_argument("--critique-max-new-tokens", type=int, help="critique budget (default: --max-new-tokens)")
    p.add_argument("--guided-layout", default="after", choices=GUIDED_LAYOUTS,
                   help="the re-solve prompt's layout: after (the paper's: problem, then guidance) | first (guidance, "
                        "then the plain solve prompt); a CURE run's data.guided_layout")
    p.add_argument("--critique-format", default="fields", choices=CRITIQUE_FORMATS,
                   help="what the critique prompt asks for: fields (the paper's four fields) | worked_check (the "
                        "task's check first, then the fields; give --critique-max-new-tokens room for both); a run's "
                        "data.critique_format")
    p.add_argument("--length-budgets",
                   help="comma-separated increasing token budgets for confidence-based length selection, e.g. "
                        "1024,2048,4096 (N fresh samples per budget)")
    p.add_argument("--tau", type=float, default=0.8,
                   help="length selection stops at the first budget whose weighted-vote winner holds >= tau of the "
                        "total verifier score (default 0.8)")
    p.add_argument("--budget-forcing", help="comma-separated total budgets k for budget forcing, e.g. 512,1024")
    p.add_argument("--forcing-buffer", type=int, default=64,
                   help="budget forcing's buffer b: sample k - b tokens, then conclude within b (default 64)")
    return p


def _int_list(flag: str, text: str) -> list:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"{flag} needs at least one positive integer, got {text!r}")
    return values


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = _parser().parse_args(argv)
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    if args.n < 1:
        raise SystemExit(f"--n must be >= 1, got {args.n}")
    for flag in ("correction_rounds", "refine_rounds"):
        if getattr(args, flag) < 0:
            raise SystemExit(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    ks = _int_list("--ks", args.ks) if args.ks else None
    budgets = _int_list("--length-budgets", args.length_budgets) if args.length_budgets else None
    if budgets and (budgets != sorted(budgets) or len(set(budgets)) != len(budgets)):
        raise SystemExit(f"--length-budgets must be strictly increasing, got {args.length_budgets!r}")
    if not 0.0 <= args.tau <= 1.0:
        raise SystemExit(f"--tau must be in [0, 1], got {args.tau}")
    forcing = _int_list("--budget-forcing", args.budget_forcing) if args.budget_forcing else None
    if forcing and min(forcing) <= args.forcing_buffer:
        raise SystemExit(f"--budget-forcing budgets must exceed --forcing-buffer={args.forcing_buffer}, got "
                         f"{args.budget_forcing!r}")
    if args.data is None:
        if not args.debug_bench:
            raise SystemExit("give --data (questions to sample and vote on) or --debug-bench (buggy programs to "
                             "repair), or both")
        pool_flags = [f for f, on in (("--judge", args.judge), ("--refine-rounds", args.refine_rounds),
                                      ("--length-budgets", budgets), ("--budget-forcing", forcing),
                                      ("--check-tokens", args.check_tokens)) if on]
        if pool_flags:
            raise SystemExit(f"{', '.join(pool_flags)} evaluate a pool of samples of --data questions; add --data")
    start = time.time()
    problems = load_debug_bench(args.debug_bench, args.limit) if args.debug_bench else None
    examples = load_data(args.data, args.limit) if args.data else None
    grader = example_grader(examples, args.grader) if examples else None
    reward_fn = example_reward(grader, args.answer_extraction) if examples else None
    model = load_pretrained(args.model, args.dtype)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer or args.model)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise SystemExit(f"tokenizer {args.tokenizer or args.model} has {tokenizer.vocab_size} ids but the model's "
                         f"embedding has {model.config.vocab_size} rows; pass the model's own --tokenizer")
    judge = None
    if args.judge:
        judge = (load_pretrained(args.judge, args.dtype),
                 Tokenizer.from_pretrained(args.judge_tokenizer or args.judge))
    sampling = dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
    if examples is None:
        results = {"config": {"max_new_tokens": args.max_new_tokens, "seed": args.seed}}
    else:
        results = evaluate(model, tokenizer, examples, n=args.n, max_new_tokens=args.max_new_tokens,
                           seed=args.seed, reward_fn=reward_fn, ks=ks, num_subsets=args.num_subsets,
                           normalize=args.normalize, judge=judge, check_tokens=args.check_tokens,
                           prompt_batch_size=args.batch_size, score_batch_size=args.score_batch_size,
                           progress=not args.no_progress, **sampling)
    if args.refine_rounds or budgets or forcing:
        from jaxrl_reason.inference import strategies

    if args.refine_rounds:
        pool = results["samples"]
        # Round 0 is each question's first pool sample, so refinement and voting start from the same samples.
        results["refinement"] = strategies.evaluate_refinement(
            model, tokenizer, examples, reward_fn, rounds=args.refine_rounds,
            max_new_tokens=args.max_new_tokens, critique_max_new_tokens=args.critique_max_new_tokens,
            initial=[r["completions"][0] for r in pool], initial_tokens=[r["lengths"][0] for r in pool],
            pool_classes=[r["classes"] for r in pool], pool_correct=[r["correct"] for r in pool],
            tokens_per_sample=results["mean_completion_tokens"],
            temperature=args.temperature if args.refine_temperature is None else args.refine_temperature,
            top_p=args.top_p, top_k=args.top_k, seed=args.seed, batch_size=args.batch_size,
            num_subsets=args.num_subsets, guided_layout=args.guided_layout, critique_format=args.critique_format)
    if budgets:
        # The main pool serves the budget equal to --max-new-tokens; other budgets draw fresh samples.
        pools = [results if b == args.max_new_tokens else
                 evaluate(model, tokenizer, examples, n=args.n, max_new_tokens=b, seed=args.seed + 1 + j,
                          reward_fn=reward_fn, ks=[args.n], num_subsets=args.num_subsets,
                          normalize=args.normalize, check_tokens=args.check_tokens,
                          prompt_batch_size=args.batch_size, score_batch_size=args.score_batch_size,
                          progress=not args.no_progress, **sampling)
                 for j, b in enumerate(budgets)]
        results["length_selection"] = strategies.length_selection(pools, args.tau)
    if forcing:
        results["budget_forcing"] = strategies.forced_budgets(
            model, tokenizer, examples, reward_fn, budgets=forcing, buffer=args.forcing_buffer, n=args.n,
            seed=args.seed, batch_size=args.batch_size, score_batch_size=args.score_batch_size,
            normalize=args.normalize, check_tokens=args.check_tokens, **sampling)
    if args.correction_rounds and examples is not None:
        from jaxrl_reason.inference.correction import evaluate_correction

        results["correction"] = evaluate_correction(model, tokenizer, examples, rounds=args.correction_rounds,
                                                    reward_fn=reward_fn,
                                                    max_new_tokens=args.max_new_tokens, seed=args.seed,
                                                    batch_size=args.batch_size,
                                                    correction_format=args.correction_format,
                                                    correction_max_new_tokens=args.correction_max_new_tokens)
    if problems is not None:
        from jaxrl_reason.inference.correction import evaluate_debug_bench

        # Greedy, as the own-attempt correction above: a repair is judged once, not sampled.
        results["debug_bench"] = evaluate_debug_bench(model, tokenizer, problems,
                                                      rounds=max(1, args.correction_rounds),
                                                      max_new_tokens=args.max_new_tokens, seed=args.seed,
                                                      batch_size=args.batch_size)
    results["config"].update({"model": args.model, "tokenizer": args.tokenizer or args.model, "data": args.data,
                              "grader": grader, "debug_bench": args.debug_bench, "judge": args.judge,
                              "dtype": args.dtype, "wall_seconds": time.time() - start})
    paths = write_outputs(results, args.out)
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


if __name__ == "__main__":
    main()
