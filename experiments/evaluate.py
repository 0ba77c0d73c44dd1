"""Evaluate a checkpoint with every test-time strategy from one pool of samples.

    python experiments/evaluate.py --model DIR [--tokenizer DIR] --data FILE.jsonl --n 16 \
        --max-new-tokens 1024 --out DIR [--judge DIR] [--refine-rounds R] [--length-budgets B1,B2 --tau T] \
        [--budget-forcing K1,K2] [--correction-rounds R] [--debug-bench generated:COUNT[:SEED]]

Samples N solutions per question once, scores them once with the model as its own RL^V verifier (and with
`--judge`, a second model as LLM-as-a-judge), then reports pass@k, maj@k, BoN@k and weighted@k at k = 1, 2, 4, ...,
N with the tokens each spends; each token-spending strategy (self-refinement, length selection, budget forcing,
self-correction, DebugBench-style repair: docs/evaluate.md) adds a section of {acc, tokens} rows. Writes to --out:
results.json (every number), results.md (the tables), accuracy_vs_k.png (accuracy against k and against tokens)
and samples.jsonl (per question: completions, answers, classes, correctness, scores).

--data takes a dataset file (.jsonl / .parquet / save_to_disk dir), a run's <workdir>/heldout.jsonl, or a generator
spec (arithmetic:COUNT[:SEED], reasoning_gym:TASK:COUNT[:SEED]); answers are graded by what the examples are
(`--grader auto`: a testbed task's checker, reasoning-gym's scorer, else the math grader).

Every flag after --no-progress is a field of `jaxrl_reason.experiment.evaluation.EvalSpec` (its default and meaning
are written there once); `evaluation.evaluate_run(model, tokenizer, examples, spec)` does the work, so
`experiment.compare` and the notebooks evaluate the same way.
"""
from __future__ import annotations

import argparse
import dataclasses
import time
import typing
from typing import Optional, Sequence

from jaxrl_reason.cpu_malloc import reexec_with_huge_pages

reexec_with_huge_pages()  # before jax is imported; only acts when this file runs as the script

from jaxrl_reason.data.prompts import (CORRECTION_FORMATS, CRITIQUE_FORMATS, GUIDED_LAYOUTS,  # noqa: E402
                                       PROMPT_WORDINGS)
from jaxrl_reason.inference.self_check import COMBINED_REVISE, COMBINED_SCORES  # noqa: E402
from jaxrl_reason.experiment import evaluation  # noqa: E402


CHOICES = {"grader": evaluation.GRADERS, "guided_layout": GUIDED_LAYOUTS, "critique_format": CRITIQUE_FORMATS,
           "correction_format": CORRECTION_FORMATS, "prompt_wording": PROMPT_WORDINGS,
           "combined_score": COMBINED_SCORES, "combined_revise": COMBINED_REVISE}
NOT_FLAGS = ("progress", "keep_samples")  # --no-progress; samples.jsonl is always written


def _parser() -> argparse.ArgumentParser:
    """The run's own flags, then one flag per EvalSpec field (its default and meaning are the field's)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="checkpoint directory (Hugging Face layout: config.json + "
                                                   "safetensors); our checkpoints are saved in it too")
    p.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    p.add_argument("--data", help="dataset file/dir or generator spec (arithmetic:COUNT[:SEED], "
                                  "reasoning_gym:TASK:COUNT[:SEED]); optional with --debug-bench")
    p.add_argument("--judge", help="second model directory, used as an LLM-as-a-judge verifier")
    p.add_argument("--judge-tokenizer", help="tokenizer of --judge (default: --judge)")
    p.add_argument("--debug-bench", metavar="SPEC",
                   help="DebugBench-style repair of buggy programs, checked in the code sandbox: "
                        "generated:COUNT[:SEED] (function tasks with one AST mutation each) or a JSONL of "
                        "buggy_code + tests records")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    hints = typing.get_type_hints(evaluation.EvalSpec)
    for f in dataclasses.fields(evaluation.EvalSpec):
        if f.name in NOT_FLAGS:
            continue
        flag, kind = "--" + f.name.replace("_", "-"), typing.get_args(hints[f.name])[:1] or (hints[f.name],)
        if kind[0] is bool:
            p.add_argument(flag, action="store_true", help=f.metadata["help"])
        else:  # tuples and the tools dict stay text: EvalSpec reads them
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            p.add_argument(flag, type=str if kind[0] in (tuple, dict) else kind[0], default=default,
                           choices=CHOICES.get(f.name), help=f.metadata["help"] + f" (default {default!r})")
    return p


def spec_from_args(args) -> evaluation.EvalSpec:
    """The flags as an EvalSpec; its refusals name the flag (a field's name with dashes)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(evaluation.EvalSpec) if f.name not in NOT_FLAGS}
    try:
        return evaluation.EvalSpec(progress=not args.no_progress, **values)
    except ValueError as e:
        raise SystemExit(_as_flags(str(e))) from None


def _as_flags(message: str) -> str:
    for f in [f.name for f in dataclasses.fields(evaluation.EvalSpec)] + ["data", "debug_bench", "judge"]:
        flag = "--" + f.replace("_", "-")
        message = message.replace(f"EvalSpec.{f}", flag).replace(f"{f}=", f"{flag}=")
    return message


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = _parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
        if args.data is None and not args.debug_bench:
            raise ValueError("give --data (questions to sample and vote on) or --debug-bench (buggy programs to "
                             "repair), or both")
        start = time.time()
        problems = evaluation.load_debug_bench(args.debug_bench) if args.debug_bench else None
        examples = evaluation.load_data(args.data) if args.data else None
        evaluation.check_request(spec, examples, problems, judge=args.judge)  # before any model is loaded
        model, tokenizer = evaluation.load_policy(args.model, args.tokenizer, args.dtype)
        judge = evaluation.load_policy(args.judge, args.judge_tokenizer, args.dtype) if args.judge else None
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(_as_flags(str(e)).replace("give examples", "add --data")) from None
    results = evaluation.evaluate_run(model, tokenizer, examples, spec, judge=judge, problems=problems)
    results["config"].update({"model": args.model, "tokenizer": args.tokenizer or args.model, "data": args.data,
                              "debug_bench": args.debug_bench, "judge": args.judge, "dtype": args.dtype,
                              "wall_seconds": time.time() - start})
    paths = evaluation.write_outputs(results, args.out)
    print(evaluation.markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return results


if __name__ == "__main__":
    main()
