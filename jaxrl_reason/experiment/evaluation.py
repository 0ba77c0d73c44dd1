"""Evaluation as a spec: which test-time strategies, how many samples, which budgets and rounds, which grader
(`EvalSpec`), and `evaluate_run(model, tokenizer, examples, spec)` that runs them from one pool of samples.

`experiments/evaluate.py` reads its flags into an EvalSpec; `experiment.compare` evaluates every arm's checkpoint
with one. The core of the pool is `inference.test_time.evaluate` (every vote at every k from the same samples);
the token-spending strategies (self-refinement, length selection, budget forcing, self-correction, DebugBench-style
repair) each add a section of {acc, tokens} rows. `write_outputs` writes results.json, results.md,
accuracy_vs_k.png and samples.jsonl (docs/results/evaluate.md).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Optional, Sequence

from jaxrl_reason.data.prompts import CORRECTION_FORMATS, CRITIQUE_FORMATS, GUIDED_LAYOUTS
from jaxrl_reason.data.testbed import TASK_MODULES as TESTBED_TASKS
from jaxrl_reason.inference.test_time import STRATEGY_LABELS, evaluate
from jaxrl_reason.knobs import check_known, plain

__all__ = ["EvalSpec", "GRADERS", "answer_reward", "check_request", "evaluate_run", "evaluate_with_tools",
           "example_grader", "example_reward", "load_data", "load_debug_bench", "load_policy", "markdown_table",
           "plot_curves", "read_eval_spec", "read_tools", "strategy_curves", "tokens_per_turn", "tool_section",
           "write_outputs"]


# The fields a run can fill in (`experiment.compare.resolve_spec`) when a spec leaves them at None.
RUN_OWN = ("max_new_tokens", "temperature", "seed", "check_tokens", "guided_layout", "critique_format",
           "correction_format", "prompt_wording", "tools")


def _knob(default, meaning: str):
    """A field with its default and its one-line meaning (experiments/evaluate.py's --help reads it)."""
    return dataclasses.field(default=default, metadata={"help": meaning})


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """How a checkpoint is evaluated. A field at None is the run's own value when `experiment.compare` evaluates a
    run (max_new_tokens: rl.max_new_tokens, temperature: rl.temperature, seed: the run's seed, check_tokens: its
    data.check_tokens when its verifier writes a check, else 0; guided_layout, critique_format and
    correction_format: its data section's; tools: its tools section); `evaluate_run` needs them set."""

    n: int = _knob(16, "samples per question")
    ks: tuple = _knob((), "comma-separated k values of every vote (empty: 1, 2, 4, ..., n)")
    limit: int = _knob(0, "evaluate only the first LIMIT questions (0: all)")
    max_new_tokens: Optional[int] = _knob(1024, "a sample's token budget")
    temperature: Optional[float] = _knob(1.0, "sampling temperature of the pool")
    top_p: float = _knob(1.0, "nucleus sampling's top-p")
    top_k: int = _knob(0, "top-k sampling (0: off)")
    seed: Optional[int] = _knob(0, "sampling seed")
    num_subsets: int = _knob(1000, "random k-subsets for maj@k / weighted@k")
    normalize: bool = _knob(False, "score = P(Yes)/(P(Yes)+P(No)) instead of P(Yes)")
    answer_extraction: str = _knob("boxed", "boxed (strict: the last \\boxed{}) or boxed_or_last_number (else the last "
                                   "number written); the math grader only")
    grader: str = _knob("auto", "what grades an answer: auto (from each example's meta source: a testbed task's "
                        "checker, reasoning-gym's scorer, else math) or one named")
    check_tokens: Optional[int] = _knob(0, "the model as its own verifier first writes a worked check of at most this "
                                        "many tokens (greedy), its verdict read after it: models trained with "
                                        "data.verify_format=worked_check or mark_check (0: the verdict right after "
                                        "the verify prompt)")
    batch_size: int = _knob(8, "questions per sampler call")
    score_batch_size: int = _knob(32, "rows per verifier prefill")
    progress: bool = _knob(True, "progress bars")
    keep_samples: bool = _knob(True, "keep each question's samples in the results (samples.jsonl)")
    refine_rounds: int = _knob(0, "CURE self-refinement rounds (critique, then re-solve from the hint unless the "
                               "verdict says no error) from each question's first pool sample (0: off)")
    refine_temperature: Optional[float] = _knob(None, "temperature of the critiques and re-solves (default: "
                                                "temperature)")
    critique_max_new_tokens: Optional[int] = _knob(None, "critique budget (default: max_new_tokens)")
    guided_layout: Optional[str] = _knob("after", "the re-solve prompt: after (the paper's: problem, then guidance) | "
                                         "first (guidance, then the plain solve prompt); a CURE run's "
                                         "data.guided_layout")
    critique_format: Optional[str] = _knob("fields", "what a critique writes: fields (the paper's four) | "
                                           "worked_check (the task's check first, then the fields); a run's "
                                           "data.critique_format")
    length_budgets: tuple = _knob((), "comma-separated increasing budgets for confidence-based length selection, "
                                  "e.g. 1024,2048,4096 (N fresh samples per budget)")
    tau: float = _knob(0.8, "length selection stops at the first budget whose weighted-vote winner holds >= tau of "
                       "the total verifier score")
    budget_forcing: tuple = _knob((), "comma-separated total budgets k for budget forcing, e.g. 512,1024")
    forcing_buffer: int = _knob(64, "budget forcing's buffer b: sample k - b tokens, then conclude within b")
    correction_rounds: int = _knob(0, "CIPO self-correction rounds of the model's own greedy attempts: the share of "
                                   "wrong attempts fixed and right ones broken per round (0: off); also DebugBench "
                                   "repair's rounds")
    correction_format: Optional[str] = _knob("solution", "what a correction writes: solution (the paper's) | "
                                             "worked_check (the task's check of the attempt first); a run's "
                                             "data.correction_format")
    correction_max_new_tokens: Optional[int] = _knob(None, "a correction's budget (default: max_new_tokens)")
    # -- a self-checking policy's test time (inference/self_check.py, docs/methods/union.md#test-time) --
    prompt_wording: Optional[str] = _knob("short", "the critique and guided prompts' wording: short | authors; a "
                                          "run's data.prompt_wording")
    critique_score: bool = _knob(False, "also score the pool with CURE's verdict, P(ERROR_FOUND: false) after the "
                                 "critique prompt (a prefill): BoN@k / weighted@k (critique)")
    combined_n: int = _knob(0, "the combined strategy over the first N pool samples of each question: score, revise "
                            "the low-scored, weighted vote over originals and revisions (0: off; <= n)")
    combined_score: str = _knob("verify", "the combined strategy's score: verify (RL^V's P(Yes)) | critique (CURE's "
                                "verdict)")
    combined_revise: str = _knob("refine", "how the combined strategy revises: refine (CURE's critique + guided "
                                 "re-solve) | correct (CIPO's correction)")
    combined_threshold: float = _knob(0.5, "revise the samples whose score is <= this (1: every sample)")
    combined_bottom: float = _knob(0.0, "revise instead the ceil(BOTTOM x k) lowest-scored of k samples (0: use "
                                   "combined_threshold)")
    as_conversation: bool = _knob(False, "self-refinement's and self-correction's rounds (and the combined "
                                  "strategy's revisions) as turns of one conversation after the solve, each prompt "
                                  "the trained one as the next user turn (default: fresh single-turn prompts)")
    budget_multiples: tuple = _knob((1, 2, 4, 8), "comma-separated budgets in units of one pool sample's mean "
                                    "tokens: every strategy's accuracy there (empty: no budget table)")
    # A dict, not a ToolConfig, so that the spec stays JSON (its cache key) and a CLI flag can write it.
    tools: Optional[dict] = dataclasses.field(default_factory=dict, metadata={"help": (
        "the policy's tools: comma-separated tool names (calculator,python) or a dict of rollout.ToolConfig fields; "
        "each sample is then a multi-turn conversation with them (a tool run's `tools` section when compare "
        "evaluates it; empty: single-turn samples)")})

    def __post_init__(self):
        for name in ("ks", "length_budgets", "budget_forcing", "budget_multiples"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    value = [int(x) for x in value.split(",") if x.strip()]
                except ValueError:
                    raise ValueError(f"EvalSpec.{name} must be comma-separated integers, got {value!r}") from None
            object.__setattr__(self, name, tuple(int(v) for v in value))
            if any(v < 1 for v in getattr(self, name)):
                raise ValueError(f"EvalSpec.{name} must hold positive integers, got {value!r}")
        for name in ("n",):
            if getattr(self, name) < 1:
                raise ValueError(f"EvalSpec.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("limit", "refine_rounds", "correction_rounds", "top_k"):
            if getattr(self, name) < 0:
                raise ValueError(f"EvalSpec.{name} must be >= 0, got {getattr(self, name)}")
        if self.ks and max(self.ks) > self.n:
            raise ValueError(f"EvalSpec.ks must lie in [1, n={self.n}], got {self.ks}; lower them or raise n")
        b = self.length_budgets
        if b and (list(b) != sorted(b) or len(set(b)) != len(b)):
            raise ValueError(f"EvalSpec.length_budgets must be strictly increasing, got {b}")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"EvalSpec.tau must be in [0, 1], got {self.tau}")
        if self.budget_forcing and min(self.budget_forcing) <= self.forcing_buffer:
            raise ValueError(f"EvalSpec.budget_forcing budgets must exceed forcing_buffer={self.forcing_buffer}, got "
                             f"{self.budget_forcing}; lower forcing_buffer or raise the budgets")
        for name, allowed in (("grader", GRADERS), ("guided_layout", GUIDED_LAYOUTS),
                              ("critique_format", CRITIQUE_FORMATS), ("correction_format", CORRECTION_FORMATS)):
            if getattr(self, name) not in allowed and not (name != "grader" and getattr(self, name) is None):
                raise ValueError(f"EvalSpec.{name} must be one of {' | '.join(allowed)}, got {getattr(self, name)!r}")
        object.__setattr__(self, "tools", read_tools(self.tools))
        from jaxrl_reason.rewards.math import ANSWER_EXTRACTIONS

        if self.answer_extraction not in ANSWER_EXTRACTIONS:
            raise ValueError(f"EvalSpec.answer_extraction must be one of {ANSWER_EXTRACTIONS}, got "
                             f"{self.answer_extraction!r}")
        self._check_self_check()

    def _check_self_check(self) -> None:
        """The self-checking policy's knobs (inference/self_check.py), each refusal naming its field."""
        from jaxrl_reason.data.prompts import PROMPT_WORDINGS
        from jaxrl_reason.inference.self_check import COMBINED_REVISE, COMBINED_SCORES

        for name, allowed in (("prompt_wording", PROMPT_WORDINGS), ("combined_score", COMBINED_SCORES),
                              ("combined_revise", COMBINED_REVISE)):
            value = getattr(self, name)
            if value not in allowed and not (name == "prompt_wording" and value is None):
                raise ValueError(f"EvalSpec.{name} must be one of {' | '.join(allowed)}, got {value!r}")
        if not 0 <= self.combined_n <= self.n:
            raise ValueError(f"EvalSpec.combined_n must lie in [0, n={self.n}] (it takes the pool's first samples), "
                             f"got {self.combined_n}")
        for name in ("combined_threshold", "combined_bottom"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"EvalSpec.{name} must be in [0, 1], got {getattr(self, name)}")
        wants_critique = self.critique_score or (self.combined_n and self.combined_score == "critique")
        if wants_critique and self.critique_format == "worked_check":
            raise ValueError("EvalSpec.critique_format=worked_check writes a check before the verdict, so the critique "
                             "score (critique_score, combined_score=critique) has no verdict to read after the prompt; "
                             "use critique_format=fields or combined_score=verify")

    def unset(self) -> list:
        """The fields a run fills in (None): `evaluate_run` refuses a spec that has any."""
        return [f for f in RUN_OWN if getattr(self, f) is None]


def read_eval_spec(values) -> EvalSpec:
    """An EvalSpec from a mapping / ConfigDict (or an EvalSpec, returned as it is); refuses an unknown key, naming it
    and the valid ones."""
    if isinstance(values, EvalSpec):
        return values
    values = plain(values)
    check_known("eval", values, [f.name for f in dataclasses.fields(EvalSpec)])
    return EvalSpec(**values)


def check_request(spec: EvalSpec, examples: Optional[Sequence], problems: Optional[Sequence] = None, *,
                  judge=None) -> None:
    """What `evaluate_run` refuses before any compute: run-own fields left unset, nothing to evaluate, and a
    strategy of a pool of samples without questions to sample."""
    if spec.unset():
        raise ValueError(f"EvalSpec fields {spec.unset()} are None (a run's own values, which only "
                         "experiment.compare fills in); give them numbers")
    if examples is None and problems is None:
        raise ValueError("evaluate_run: give examples (questions to sample and vote on) or problems (buggy programs "
                         "to repair), or both")
    if examples is None:
        pool_only = [f for f, on in (("judge", judge), ("refine_rounds", spec.refine_rounds),
                                     ("length_budgets", spec.length_budgets), ("budget_forcing", spec.budget_forcing),
                                     ("check_tokens", spec.check_tokens), ("critique_score", spec.critique_score),
                                     ("combined_n", spec.combined_n)) if on]
        if pool_only:
            raise ValueError(f"{', '.join(pool_only)} evaluate a pool of samples of questions; give examples")


def load_policy(model_dir: str, tokenizer_dir: Optional[str] = None, dtype: str = "float32") -> tuple:
    """(model, tokenizer) of a checkpoint directory (Hugging Face layout) and its tokenizer (default: the same
    directory); refuses a tokenizer with more ids than the model's embedding has rows."""
    from jaxrl_reason.models.hf_port import load_pretrained
    from jaxrl_reason.tokenization import Tokenizer

    model = load_pretrained(model_dir, dtype)
    tokenizer = Tokenizer.from_pretrained(tokenizer_dir or model_dir)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ValueError(f"tokenizer {tokenizer_dir or model_dir} has {tokenizer.vocab_size} ids but the model's "
                         f"embedding has {model.config.vocab_size} rows; pass the model's own tokenizer")
    return model, tokenizer


def evaluate_run(model, tokenizer, examples: Optional[Sequence], spec: EvalSpec, *, reward_fn=None, judge=None,
                 problems: Optional[Sequence] = None, prompt_fn=None, answer_instruction: Optional[str] = None) -> dict:
    """Every strategy `spec` asks for on `examples` (Example objects; None with `problems` alone), from one pool of
    `spec.n` samples per question. reward_fn(completions, examples) -> RewardResult (default: the grader
    `spec.grader` names for these examples); judge: an optional (model, tokenizer) used as LLM-as-a-judge;
    problems: buggy programs for DebugBench-style repair (`load_debug_bench`); prompt_fn / answer_instruction: the
    task's solve prompt and a CIPO run's answer instruction for self-correction (default: the math ones). Returns
    the results dict that
    `write_outputs` writes (its "config" says what ran)."""
    check_request(spec, examples, problems, judge=judge)
    start = time.time()
    if spec.limit:
        examples = None if examples is None else list(examples)[:spec.limit]
        problems = None if problems is None else list(problems)[:spec.limit]
    grader = None
    if examples is not None and reward_fn is None:
        grader = example_grader(examples, spec.grader)
        reward_fn = example_reward(grader, spec.answer_extraction)
    sampling = dict(temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k)
    pool_args = dict(reward_fn=reward_fn, num_subsets=spec.num_subsets, normalize=spec.normalize,
                     check_tokens=spec.check_tokens, prompt_batch_size=spec.batch_size,
                     score_batch_size=spec.score_batch_size, progress=spec.progress, **sampling)
    if examples is None:
        results = {"config": {"max_new_tokens": spec.max_new_tokens, "seed": spec.seed}}
    elif spec.tools:  # a tool-using policy: a pool of conversations with its tools
        if judge is not None:
            raise ValueError("EvalSpec.tools with a judge: the judge reads single-turn completions; drop one")
        results = evaluate_with_tools(model, tokenizer, examples, spec, reward_fn=reward_fn, prompt_fn=prompt_fn,
                                      grader=grader)
    else:
        results = evaluate(model, tokenizer, examples, n=spec.n, max_new_tokens=spec.max_new_tokens, seed=spec.seed,
                           ks=list(spec.ks) or None, judge=judge, **pool_args)
    if spec.refine_rounds or spec.length_budgets or spec.budget_forcing:
        from jaxrl_reason.inference import strategies

    if spec.refine_rounds:
        pool = results["samples"]
        # Round 0 is each question's first pool sample, so refinement and voting start from the same samples.
        results["refinement"] = strategies.evaluate_refinement(
            model, tokenizer, examples, reward_fn, rounds=spec.refine_rounds,
            max_new_tokens=spec.max_new_tokens, critique_max_new_tokens=spec.critique_max_new_tokens,
            initial=[r["completions"][0] for r in pool], initial_tokens=[r["lengths"][0] for r in pool],
            pool_classes=[r["classes"] for r in pool], pool_correct=[r["correct"] for r in pool],
            tokens_per_sample=results["mean_completion_tokens"],
            temperature=spec.temperature if spec.refine_temperature is None else spec.refine_temperature,
            top_p=spec.top_p, top_k=spec.top_k, seed=spec.seed, batch_size=spec.batch_size,
            num_subsets=spec.num_subsets, guided_layout=spec.guided_layout, critique_format=spec.critique_format,
            prompt_wording=spec.prompt_wording, conversation=spec.as_conversation)
    if spec.length_budgets:
        # The main pool serves the budget equal to max_new_tokens; other budgets draw fresh samples.
        pools = [results if b == spec.max_new_tokens else
                 evaluate(model, tokenizer, examples, n=spec.n, max_new_tokens=b, seed=spec.seed + 1 + j,
                          ks=[spec.n], **pool_args)
                 for j, b in enumerate(spec.length_budgets)]
        results["length_selection"] = strategies.length_selection(pools, spec.tau)
    if spec.budget_forcing:
        results["budget_forcing"] = strategies.forced_budgets(
            model, tokenizer, examples, reward_fn, budgets=list(spec.budget_forcing), buffer=spec.forcing_buffer,
            n=spec.n, seed=spec.seed, batch_size=spec.batch_size, score_batch_size=spec.score_batch_size,
            normalize=spec.normalize, check_tokens=spec.check_tokens, **sampling)
    if spec.correction_rounds and examples is not None:
        from jaxrl_reason.inference.correction import evaluate_correction

        task_prompts = {k: v for k, v in (("prompt_fn", prompt_fn), ("answer_instruction", answer_instruction)) if v}
        results["correction"] = evaluate_correction(model, tokenizer, examples, rounds=spec.correction_rounds,
                                                    **task_prompts,
                                                    reward_fn=reward_fn, max_new_tokens=spec.max_new_tokens,
                                                    seed=spec.seed, batch_size=spec.batch_size,
                                                    correction_format=spec.correction_format,
                                                    correction_max_new_tokens=spec.correction_max_new_tokens,
                                                    conversation=spec.as_conversation)
    if problems is not None:
        from jaxrl_reason.inference.correction import evaluate_debug_bench

        # Greedy, as the own-attempt correction above: a repair is judged once, not sampled.
        results["debug_bench"] = evaluate_debug_bench(model, tokenizer, problems,
                                                      rounds=max(1, spec.correction_rounds),
                                                      max_new_tokens=spec.max_new_tokens, seed=spec.seed,
                                                      batch_size=spec.batch_size)
    if examples is not None:
        _self_check_strategies(results, model, tokenizer, examples, spec, reward_fn=reward_fn, grader=grader,
                               answer_instruction=answer_instruction)
    if not spec.keep_samples:
        results.pop("samples", None)
    results["config"].update({"grader": grader, "wall_seconds": time.time() - start})
    return results


def _self_check_strategies(results: dict, model, tokenizer, examples, spec: EvalSpec, *, reward_fn, grader,
                           answer_instruction: Optional[str]) -> None:
    """A self-checking policy's strategies (inference/self_check.py), in place: the critique score of the pool
    (spec.critique_score), the combined strategy (spec.combined_n), then every strategy at matched budgets
    (spec.budget_multiples; it reads the pool's samples, so it runs last)."""
    from jaxrl_reason.inference import self_check as sc

    if spec.critique_score:
        sc.add_critique_scores(results, model, tokenizer, critique_format=spec.critique_format,
                               wording=spec.prompt_wording, normalize=spec.normalize,
                               batch_size=spec.score_batch_size)
    if spec.combined_n:
        from jaxrl_reason.data.prompts import SOLVE_INSTRUCTION
        from jaxrl_reason.inference.refine import make_generate

        scorer = sc.own_scorer(model, tokenizer, spec.combined_score, normalize=spec.normalize,
                               batch_size=spec.score_batch_size, check_tokens=spec.check_tokens,
                               critique_format=spec.critique_format, wording=spec.prompt_wording)
        # Re-solves are sampled as self-refinement samples them; corrections are greedy as self-correction's are.
        temperature = ((spec.temperature if spec.refine_temperature is None else spec.refine_temperature)
                       if spec.combined_revise == "refine" else 0.0)
        generate = make_generate(model, tokenizer, temperature=temperature, top_p=spec.top_p, top_k=spec.top_k,
                                 seed=spec.seed + 1, batch_size=spec.batch_size)
        if spec.combined_revise == "refine":
            revise = sc.refine_reviser(model, tokenizer, reward_fn, max_new_tokens=spec.max_new_tokens,
                                       critique_max_new_tokens=spec.critique_max_new_tokens,
                                       guided_layout=spec.guided_layout, critique_format=spec.critique_format,
                                       wording=spec.prompt_wording, generate=generate,
                                       conversation=spec.as_conversation)
        else:
            revise = sc.correct_reviser(tokenizer, reward_fn, generate=generate,
                                        max_new_tokens=spec.correction_max_new_tokens or spec.max_new_tokens,
                                        answer_instruction=answer_instruction or SOLVE_INSTRUCTION,
                                        correction_format=spec.correction_format,
                                        conversation=spec.as_conversation)
        ks = sorted({k for k in results["ks"] if k <= spec.combined_n} | {spec.combined_n})
        combined = sc.combined_strategy(model, tokenizer, examples, reward_fn, results, scorer=scorer,
                                        revise=revise, n=spec.combined_n, ks=ks, threshold=spec.combined_threshold,
                                        bottom=spec.combined_bottom)
        combined["config"] = {"n": spec.combined_n, "score": spec.combined_score, "revise": spec.combined_revise,
                              "threshold": spec.combined_threshold, "bottom": spec.combined_bottom,
                              "temperature": temperature, "as_conversation": spec.as_conversation}
        results["combined"] = combined
    if spec.budget_multiples:
        results["budgets"] = sc.matched_budgets(results, spec.budget_multiples)


def load_data(spec: str, limit: Optional[int] = None) -> list:
    """Examples from a dataset path or a generator spec (see the module docstring); the first `limit` only."""
    from jaxrl_reason.data.datasets import load_examples

    head = spec.split(":", 1)[0]
    if head in ("arithmetic", "reasoning_gym") and not os.path.exists(spec):
        parts = spec.split(":")
        sizes = {"arithmetic": (2, 3), "reasoning_gym": (3, 4)}[head]
        numbers = parts[1:] if head == "arithmetic" else parts[2:]
        if len(parts) not in sizes or not all(x.strip().lstrip("-").isdigit() for x in numbers):
            raise ValueError(f"data {spec!r}: expected arithmetic:COUNT[:SEED] or "
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
            raise FileNotFoundError(f"data {spec!r}: no such file or directory, and not a generator spec "
                                    "(arithmetic:COUNT[:SEED], reasoning_gym:TASK:COUNT[:SEED])")
        examples = load_examples(spec)
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise ValueError(f"data {spec!r} holds no examples")
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
            raise ValueError(f"debug_bench {spec!r}: use generated:COUNT[:SEED] with COUNT >= 1") from None
        problems = cd.make_correction_problems(cd.generate_function_tasks(count, seed=seed), seed=seed)
    elif os.path.exists(spec):
        problems = cd.load_correction_jsonl(spec)
    else:
        raise FileNotFoundError(f"debug_bench {spec!r}: no such file; give a JSONL of buggy_code + tests records or "
                         "generated:COUNT[:SEED]")
    problems = problems[:limit] if limit else problems
    if not problems:
        raise ValueError(f"debug_bench {spec!r} holds no buggy program")
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
        lines.append(f"| {_label(name)} | " + " | ".join(cells) + " |")
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
    lines += tool_section(results)
    lines += _strategy_sections(results) + _self_check_sections(results)
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


def _label(name: str) -> str:
    """A pool strategy's label: the verifier's (test_time.STRATEGY_LABELS) or the critique score's."""
    from jaxrl_reason.inference.self_check import CRITIQUE_LABELS

    return {**STRATEGY_LABELS, **CRITIQUE_LABELS}.get(name, name)


def _self_check_sections(results: dict) -> list:
    """Markdown for the combined strategy and the matched-budget table, when present."""
    from jaxrl_reason.experiment.plots import format_table

    lines = []
    if "combined" in results:
        from jaxrl_reason.inference.self_check import combined_label

        c = results["combined"]
        lines += ["", f"## {combined_label(c['config'])}", "",
                  f"The first k of N = {c['config']['n']} pool samples scored by the model's own "
                  f"{c['config']['score']} score; those picked revised once ({c['config']['revise']}); a weighted "
                  "vote over originals and revisions by the same score. tokens: generated per question (samples, "
                  "critiques, re-solves or corrections); prefill: scoring prompts; revised: share of samples sent. "
                  f"{c['revisions']} revisions asked, {c['revisions_made']} written.", "",
                  format_table(c["rows"], ["k", "acc", "tokens", "prefill", "revised"])]
    turn_rows = []
    if "turn_tokens" in results.get("refinement", {}):
        tt = results["refinement"]["turn_tokens"]
        turn_rows += [{"strategy": "self-refinement", "round": t + 1, "generated": tt["critique"][t] + tt["resolve"][t],
                       "prompt": tt["prompt"][t], "new_prompt": tt["new_prompt"][t]} for t in range(len(tt["prompt"]))]
    if "turn_tokens" in results.get("correction", {}):
        tt = results["correction"]["turn_tokens"]
        turn_rows += [{"strategy": "self-correction", "round": t, "generated": tt["generated"][t],
                       "prompt": tt["prompt"][t], "new_prompt": tt["new_prompt"][t]}
                      for t in range(1, len(tt["prompt"]))]
    if turn_rows:
        conv = results.get("refinement", {}).get("config", {}).get("as_conversation") or results.get(
            "correction", {}).get("as_conversation")
        lines += ["", f"## Turns ({'one conversation' if conv else 'single-turn prompts'})", "",
                  "Per question, per round: tokens generated; prompt tokens the model read before them (prompt); of "
                  "them, new since the last turn (new_prompt: what a prefill continuing from a KV cache reads).", "",
                  format_table(turn_rows, ["strategy", "round", "generated", "prompt", "new_prompt"])]
    if "budgets" in results:
        b = results["budgets"]
        ms = b["multiples"]
        lines += ["", f"## Every strategy at matched budgets (unit: one sample, {b['unit_tokens']:.1f} tokens)", "",
                  f"At budget m x unit, each strategy's setting is {b['rule']}; '-': no setting fits.", "",
                  "| strategy | " + " | ".join(f"{m}x" for m in ms) + " |", "|---|" + "---|" * len(ms)]
        for name, cells in b["table"].items():
            lines.append(f"| {name} | " + " | ".join("-" if c["acc"] is None else
                                                     f"{c['acc']:.4f} ({c['point']}, {c['tokens']:.0f})"
                                                     for c in cells) + " |")
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
        curves[_label(name)] = pts
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
    if "combined" in results:
        from jaxrl_reason.inference.self_check import combined_label

        curves[combined_label(results["combined"]["config"])] = [{"tokens": r["tokens"], "acc": r["acc"]}
                                                                 for r in results["combined"]["rows"]]
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
        raise ValueError(f"answer_extraction must be one of {ANSWER_EXTRACTIONS}, got {extraction!r}")
    return functools.partial(default_reward, extraction=extraction)


GRADERS = ("auto", "math", "reasoning_gym", *TESTBED_TASKS)


def example_grader(examples: Sequence, grader: str = "auto") -> str:
    """The name of what grades `examples`: `grader` itself, or with "auto" the examples' own `meta["source"]` --
    a testbed task (a run's heldout.jsonl keeps the source), reasoning_gym, else math. Pools of code problems are
    refused: they are graded in the sandbox by `--debug-bench` or the trainer, not by an answer grader."""
    if grader not in GRADERS:
        raise ValueError(f"grader must be one of {' | '.join(GRADERS)}, got {grader!r}")
    if any("tests" in (e.meta or {}) for e in examples):
        raise ValueError("the data holds code problems (meta.tests); a pool of programs is not graded by an answer "
                         "grader here: use debug_bench for repair, or the trainer's held-out evaluation")
    if grader != "auto":
        return grader
    sources = {(e.meta or {}).get("source") for e in examples}
    known = sources & {"reasoning_gym", *TESTBED_TASKS}
    if len(known) > 1 or (known and len(sources) > 1):
        raise ValueError(f"the data mixes sources {sorted(map(str, sources))}; evaluate one task at a time or name "
                         "the grader (grader=...)")
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


# ---- Evaluation of a tool-using policy (issue 59): its pool is multi-turn conversations with its tools ----------

# What a tool pool does not serve: each reads or re-prompts single-turn completions, untested on conversations.
_NOT_WITH_TOOLS = ("refine_rounds", "length_budgets", "budget_forcing", "correction_rounds", "check_tokens",
                   "critique_score", "combined_n", "as_conversation")


def read_tools(value) -> Optional[dict]:
    """EvalSpec.tools as a plain dict of `rollout.ToolConfig` fields ({}: no tools; None: the run's own, left for
    `experiment.compare` to fill in). Takes a dict, a ToolConfig, comma-separated tool names or a dict literal;
    refuses an unknown field or tool, naming it and the valid ones."""
    import ast

    from jaxrl_reason.rollout import ToolConfig

    if value is None:
        return None
    if isinstance(value, ToolConfig):
        value = dataclasses.asdict(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ValueError(f"EvalSpec.tools: {value!r} is not a dict literal; write e.g. "
                                 "{'tools': ('calculator',), 'max_turns': 3} or calculator,python") from None
        else:
            value = {"tools": tuple(t.strip() for t in text.split(",") if t.strip())}
    value = plain(value)
    if not isinstance(value, dict):
        raise ValueError(f"EvalSpec.tools must be tool names or a dict of ToolConfig fields, got {value!r}")
    check_known("eval.tools", value, [f.name for f in dataclasses.fields(ToolConfig)])
    try:
        cfg = ToolConfig(**value)
    except ValueError as e:
        raise ValueError(f"EvalSpec.tools: {e}") from None
    return dataclasses.asdict(cfg) if cfg.enabled else {}


def evaluate_with_tools(model, tokenizer, examples: Sequence, spec: EvalSpec, *, reward_fn, prompt_fn=None,
                        grader=None) -> dict:
    """The pool of a tool-using policy: `spec.n` conversations per question with the tools `spec.tools` names
    (`rollout.multi_turn_sample`, from the environment's first message, within `spec.max_new_tokens` model and
    environment tokens), graded on the model's turns (an environment's own reward wins where it gives one). The
    result has `evaluate`'s layout (pass@k and maj@k; no verifier scores) and a "tools" section: calls per
    question, their success rate, turns, and model / environment tokens per turn."""
    import jax
    import numpy as np

    from jaxrl_reason.data.prompts import solve_prompt
    from jaxrl_reason.inference import estimators as est
    from jaxrl_reason.inference.test_time import accuracy_curves
    from jaxrl_reason.rewards.math import equivalence_classes
    from jaxrl_reason.rollout import ToolConfig
    from jaxrl_reason.rollout.multiturn import multi_turn_sample

    if not spec.tools:
        raise ValueError("evaluate_with_tools: EvalSpec.tools names no tool; set it (e.g. tools=calculator)")
    off = [f for f in _NOT_WITH_TOOLS if getattr(spec, f)]
    if off:
        raise ValueError(f"EvalSpec.tools with {', '.join(off)}: those strategies re-read single-turn completions "
                         "and are not built for tool conversations; set them to 0 / empty or drop tools")
    examples = list(examples)
    if not examples:
        raise ValueError("evaluate_with_tools: no examples given")
    cfg = ToolConfig(**spec.tools)
    make_env = cfg.make_env(prompt_fn or solve_prompt)
    q, n = len(examples), spec.n
    ks = est.power_of_two_ks(n) if not spec.ks else sorted(spec.ks)
    key = jax.random.PRNGKey(spec.seed)
    texts, finish, turns, calls, calls_ok, env_rewards = [], [], [], [], [], []
    for start in range(0, q, spec.batch_size):
        out = multi_turn_sample(model, tokenizer, examples[start:start + spec.batch_size], make_env,
                                jax.random.fold_in(key, start), config=cfg, max_tokens=spec.max_new_tokens,
                                num_samples=n, temperature=spec.temperature, top_p=spec.top_p, top_k=spec.top_k)
        texts += list(out.texts)
        finish += list(out.finish)
        turns += list(out.turns)
        calls.append(out.calls)
        calls_ok.append(out.calls_ok)
        env_rewards.append(out.env_rewards)
    calls, calls_ok, env_rewards = (np.concatenate(x) for x in (calls, calls_ok, env_rewards))
    repeated = [e for e in examples for _ in range(n)]
    reward = reward_fn(texts, repeated)
    scores = np.where(np.isnan(env_rewards), np.asarray(reward.scores, np.float64), env_rewards)
    correct = scores.reshape(q, n)
    answers = [d.get("extracted") for d in reward.details]
    classes = np.array([equivalence_classes(answers[i * n:(i + 1) * n], grader=grader) for i in range(q)],
                       np.int64).reshape(q, n)
    model_tokens = np.array([sum(m for m, _ in t) for t in turns], np.float64)
    env_tokens = np.array([sum(e or 0 for _, e in t) for t in turns], np.float64)
    mean_model, mean_env = float(model_tokens.mean()), float(env_tokens.mean())
    return {
        "num_questions": q, "n": n, "ks": ks, "num_subsets": spec.num_subsets,
        "sample_accuracy": float(correct.mean()),
        "strategies": accuracy_curves(correct, classes, ks, num_subsets=spec.num_subsets, seed=spec.seed),
        # the environment's tokens are read, not generated: counted apart, as the trainer's masks count them
        "tokens_per_question": {"generated": [k * mean_model for k in ks],
                                "environment": [k * mean_env for k in ks],
                                "verifier_prompt": [0.0 for _ in ks]},
        "mean_completion_tokens": mean_model,
        "no_answer_rate": float((classes < 0).mean()),
        "finish_reasons": {f: float(np.mean([x == f for x in finish])) for f in ("eos", "length", "budget",
                                                                                 "max_turns")},
        "verifier": {}, "vote_headroom": {},
        "tools": {"tools": list(cfg.tools), "calls_per_question": float(calls.mean()),
                  "call_success": float(calls_ok.sum() / calls.sum()) if calls.sum() else None,
                  "turns_mean": float(np.mean([len(t) for t in turns])),
                  "model_tokens_per_question": mean_model, "env_tokens_per_question": mean_env,
                  "per_turn": tokens_per_turn(turns)},
        "config": {"max_new_tokens": spec.max_new_tokens, "temperature": spec.temperature, "top_p": spec.top_p,
                   "top_k": spec.top_k, "seed": spec.seed, "tools": spec.tools},
        "samples": [{"id": e.id, "question": e.question, "gold": e.answer, "completions": texts[i * n:(i + 1) * n],
                     "answers": answers[i * n:(i + 1) * n], "classes": classes[i].tolist(),
                     "correct": correct[i].tolist(), "lengths": model_tokens[i * n:(i + 1) * n].tolist(),
                     "env_tokens": env_tokens[i * n:(i + 1) * n].tolist(),
                     "calls": calls[i * n:(i + 1) * n].tolist(), "calls_ok": calls_ok[i * n:(i + 1) * n].tolist(),
                     "turns": [list(map(list, t)) for t in turns[i * n:(i + 1) * n]],
                     "finish": finish[i * n:(i + 1) * n]} for i, e in enumerate(examples)],
    }


def tokens_per_turn(turns: Sequence) -> list:
    """[{turn, rows, model_tokens, env_tokens}] per turn index: how many conversations reached the turn and their
    mean model tokens in it and environment tokens after it (0 where the turn called no tool)."""
    import numpy as np

    out = []
    for t in range(max((len(x) for x in turns), default=0)):
        at = [x[t] for x in turns if len(x) > t]
        out.append({"turn": t + 1, "rows": len(at), "model_tokens": float(np.mean([m for m, _ in at])),
                    "env_tokens": float(np.mean([e or 0 for _, e in at]))})
    return out


def tool_section(results: dict) -> list:
    """Markdown lines of a tool pool's "tools" section (none without it)."""
    t = results.get("tools")
    if not t:
        return []
    success = "-" if t["call_success"] is None else f"{t['call_success']:.3f}"
    lines = ["", f"## Tools ({', '.join(t['tools'])})", "",
             f"Calls per question {t['calls_per_question']:.2f} (success {success}); turns {t['turns_mean']:.2f}; "
             f"model / environment tokens per conversation {t['model_tokens_per_question']:.1f} / "
             f"{t['env_tokens_per_question']:.1f}.", "",
             "| turn | conversations | model tokens | environment tokens |", "|---|---|---|---|"]
    lines += [f"| {r['turn']} | {r['rows']} | {r['model_tokens']:.1f} | {r['env_tokens']:.1f} |" for r in t["per_turn"]]
    return lines
