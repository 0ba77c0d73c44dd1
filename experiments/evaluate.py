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

The flags are the fields of `jaxrl_reason.experiment.evaluation.EvalSpec` (one flag per field, dashes for
underscores); `evaluation.evaluate_run(model, tokenizer, examples, spec)` does the work, so `experiment.compare`
and the notebooks evaluate the same way.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional, Sequence

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.data.prompts import CORRECTION_FORMATS, CRITIQUE_FORMATS, GUIDED_LAYOUTS  # noqa: E402
from jaxrl_reason.experiment import evaluation  # noqa: E402


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
    p.add_argument("--grader", default="auto", choices=evaluation.GRADERS,
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


SPEC_FLAGS = ("n", "ks", "limit", "max_new_tokens", "temperature", "top_p", "top_k", "seed", "num_subsets", "normalize",
              "answer_extraction", "grader", "check_tokens", "batch_size", "score_batch_size", "refine_rounds",
              "refine_temperature", "critique_max_new_tokens", "guided_layout", "critique_format", "length_budgets",
              "tau", "budget_forcing", "forcing_buffer", "correction_rounds", "correction_format",
              "correction_max_new_tokens")


def spec_from_args(args) -> evaluation.EvalSpec:
    """The flags as an EvalSpec; its refusals name the flag (a field's name with dashes)."""
    values = {f: getattr(args, f) for f in SPEC_FLAGS}
    values.update(ks=values["ks"] or (), limit=values["limit"] or 0, length_budgets=values["length_budgets"] or (),
                  budget_forcing=values["budget_forcing"] or (), progress=not args.no_progress)
    try:
        return evaluation.EvalSpec(**values)
    except ValueError as e:
        raise SystemExit(_as_flags(str(e))) from None


def _as_flags(message: str) -> str:
    for f in SPEC_FLAGS + ("data", "debug_bench", "judge"):
        message = message.replace(f"EvalSpec.{f}", f"--{f.replace('_', '-')}")
        message = message.replace(f"{f}=", f"--{f.replace('_', '-')}=")
    return message


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = _parser().parse_args(argv)
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    try:
        spec = spec_from_args(args)
        if args.data is None and not args.debug_bench:
            raise ValueError("give --data (questions to sample and vote on) or --debug-bench (buggy programs to "
                             "repair), or both")
        start = time.time()
        problems = evaluation.load_debug_bench(args.debug_bench) if args.debug_bench else None
        examples = evaluation.load_data(args.data) if args.data else None
        grader = evaluation.example_grader(examples[:spec.limit or None], spec.grader) if examples else None
        reward_fn = evaluation.example_reward(grader, spec.answer_extraction) if examples else None
        if examples is None and (args.judge or spec.refine_rounds or spec.length_budgets or spec.budget_forcing
                                 or spec.check_tokens):
            evaluation.evaluate_run(None, None, None, spec, judge=args.judge, problems=problems)  # refuses
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(_as_flags(str(e)).replace("give examples", "add --data")) from None
    model = load_pretrained(args.model, args.dtype)
    tokenizer = Tokenizer.from_pretrained(args.tokenizer or args.model)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise SystemExit(f"tokenizer {args.tokenizer or args.model} has {tokenizer.vocab_size} ids but the model's "
                         f"embedding has {model.config.vocab_size} rows; pass the model's own --tokenizer")
    judge = None
    if args.judge:
        judge = (load_pretrained(args.judge, args.dtype),
                 Tokenizer.from_pretrained(args.judge_tokenizer or args.judge))
    results = evaluation.evaluate_run(model, tokenizer, examples, spec, reward_fn=reward_fn, judge=judge,
                                      problems=problems)
    results["config"].update({"model": args.model, "tokenizer": args.tokenizer or args.model, "data": args.data,
                              "grader": grader, "debug_bench": args.debug_bench, "judge": args.judge,
                              "dtype": args.dtype, "wall_seconds": time.time() - start})
    paths = evaluation.write_outputs(results, args.out)
    print(evaluation.markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


if __name__ == "__main__":
    main()
