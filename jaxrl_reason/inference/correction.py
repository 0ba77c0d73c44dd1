"""Test-time correction (docs/methods/cipo.md#spec-test-time), what a CIPO policy is trained for: give the model an
attempt -- its own, or a buggy program (DebugBench style, `data.code_datasets.make_correction_problems`) -- and ask for
a corrected complete solution with the training template, `replay_correction_prompt`; R rounds, each correcting the
previous round's output:

    round 0:  the given attempts y_0 (their correctness from the same verifier)
    round t:  y_t = generate(replay_correction_prompt(x, y_{t-1}, answer_instruction))

With `correction_format="worked_check"` a reply opens with its check of y_{t-1}; on a testbed task with a worked
check the next round reviews the solution after that check (`data.testbed.correction_solution`), as training's
corrections review solutions; elsewhere (no fixed check layout) the whole reply.

Reported per round: accuracy, the share of wrong attempts fixed and of right attempts broken (relative to the
previous round and to round 0), and the tokens spent. [choice] Every example is corrected in every round, right or
not: the model is not told which attempts are right, as in training, so the break rate measures what it costs.

Any generator works: `generate(prompt_token_lists, *, max_new_tokens) -> completion token lists`
(`inference.refine.make_generate(model, tokenizer, ...)` for a model).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

from jaxrl_reason.data.code_datasets import CorrectionProblem, as_examples
from jaxrl_reason.data.prompts import CODE_INSTRUCTION, SOLVE_INSTRUCTION, replay_correction_prompt, solve_prompt
from jaxrl_reason.data.testbed import TASK_MODULES, correction_solution, task_of
from jaxrl_reason.inference.refine import decode_ids, graded_right, make_generate, next_turn
from jaxrl_reason.rewards.math import math_reward

Generate = Callable[..., list]  # (prompts: list[list[int]], *, max_new_tokens: int) -> list[list[int]]


class CorrectionResult(NamedTuple):
    """N examples through R correction rounds.

    correct: bool  [R + 1, N]  correctness of the standing attempt after round t (0: the given attempts)
    tokens:  int64 [R + 1, N]  tokens generated in round t (round 0: 0, the attempts were given)
    texts:   [N] the attempts after the last round
    prompt_tokens: int64 [R + 1, N] tokens the model read before round t's correction (round 0: 0; as one
             conversation: the whole conversation so far), or None when not recorded
    new_prompt_tokens: the same less what an earlier turn already held (as one conversation: only the new user
             turn, what a prefill continuing from the KV cache would read)
    """

    correct: np.ndarray
    tokens: np.ndarray
    texts: list
    prompt_tokens: Optional[np.ndarray] = None
    new_prompt_tokens: Optional[np.ndarray] = None

    def summary(self) -> dict:
        """Flat dict: per round, accuracy, fix / break rates against the previous round and against round 0 (nan
        when no attempt of that kind existed) and mean tokens per example, cumulative."""
        c = self.correct
        n = max(c.shape[1], 1)
        rate = lambda mask, val: float(val[mask].mean()) if mask.any() else float("nan")
        out = {"correct/round0/accuracy": float(c[0].mean())}
        cum = np.cumsum(self.tokens.sum(axis=1)) / n
        for t in range(1, c.shape[0]):
            p = f"correct/round{t}"
            out[f"{p}/accuracy"] = float(c[t].mean())
            out[f"{p}/fix_rate"] = rate(~c[t - 1], c[t])
            out[f"{p}/break_rate"] = rate(c[t - 1], ~c[t])
            out[f"{p}/fix_rate_vs_round0"] = rate(~c[0], c[t])
            out[f"{p}/break_rate_vs_round0"] = rate(c[0], ~c[t])
            out[f"{p}/tokens_per_example"] = float(cum[t])
        return out

    def rows(self, round0_tokens: float = 0.0) -> list:
        """One dict per round t = 0..R for a table or a curve: {round, acc, fix_rate, break_rate (against round
        t - 1; nan at round 0 or with no attempt of that kind), tokens (mean per example, cumulative; round 0 costs
        `round0_tokens`, what producing the attempts cost, 0 when they were given)}."""
        s = self.summary()
        out = [{"round": 0, "acc": s["correct/round0/accuracy"], "fix_rate": float("nan"),
                "break_rate": float("nan"), "tokens": float(round0_tokens)}]
        for t in range(1, self.correct.shape[0]):
            p = f"correct/round{t}"
            out.append({"round": t, "acc": s[f"{p}/accuracy"], "fix_rate": s[f"{p}/fix_rate"],
                        "break_rate": s[f"{p}/break_rate"],
                        "tokens": float(round0_tokens) + s[f"{p}/tokens_per_example"]})
        return out


def self_correct(generate: Generate, tokenizer, examples: Sequence, attempts: Sequence[str], reward_fn, *,
                 rounds: int = 1, max_new_tokens: int = 512, answer_instruction: str = SOLVE_INSTRUCTION,
                 attempt_correct: Optional[Sequence[bool]] = None,
                 correction_format: str = "solution", conversation: Optional[Sequence] = None) -> CorrectionResult:
    """Run `rounds` correction rounds from `attempts` (one per example, with `.question`); `reward_fn(texts,
    examples) -> RewardResult`. `attempt_correct` gives round 0's correctness when known (else it is scored).
    `correction_format`: what the prompt asks for (`prompts.replay_correction_prompt`; a run's
    data.correction_format). `conversation`: [choice] each attempt's prompt token ids; the rounds then run as turns
    of one conversation (`refine.next_turn`): the correction prompt follows the attempt as the next user turn, and
    each later round's follows the previous correction. Default: each round a fresh single-turn prompt."""
    if len(attempts) != len(examples):
        raise ValueError(f"self_correct: {len(attempts)} attempts for {len(examples)} examples; give one each")
    if int(rounds) < 1:
        raise ValueError(f"self_correct: rounds must be >= 1, got {rounds}")
    texts = [str(a) for a in attempts]
    tasks = check_tasks(examples) if correction_format == "worked_check" else None
    first = (graded_right(reward_fn, texts, examples) if attempt_correct is None
             else np.asarray(attempt_correct, bool).reshape(-1))
    if first.shape != (len(examples),):
        raise ValueError(f"self_correct: attempt_correct has shape {first.shape}; give one flag per example")
    correct, tokens = [first], [np.zeros(len(examples), np.int64)]
    read, new_read = [np.zeros(len(examples), np.int64)], [np.zeros(len(examples), np.int64)]
    stops = tuple(tokenizer.stop_ids) if conversation is not None else ()
    if conversation is not None:
        if len(conversation) != len(examples):
            raise ValueError(f"self_correct: conversation holds {len(conversation)} prompts for {len(examples)} "
                             "examples; give one each")
        history = [list(p) + tokenizer.encode(a) for p, a in zip(conversation, texts)]
    for _ in range(int(rounds)):
        asks = [replay_correction_prompt(e.question, t, answer_instruction, correction_format)
                for e, t in zip(examples, texts)]
        if conversation is None:
            prompts = tokenizer.encode_ragged([tokenizer.render_prompt(a) for a in asks])
            new_read.append(np.array([len(p) for p in prompts], np.int64))
        else:
            prompts = [next_turn(tokenizer, h, a, stops) for h, a in zip(history, asks)]
            new_read.append(np.array([len(p) - len(h) + int(bool(h) and h[-1] in stops)
                                      for p, h in zip(prompts, history)], np.int64))
        read.append(np.array([len(p) for p in prompts], np.int64))
        ids = generate(prompts, max_new_tokens=max_new_tokens)
        if conversation is not None:
            history = [list(p) + list(x) for p, x in zip(prompts, ids)]
        replies = decode_ids(tokenizer, ids)
        correct.append(graded_right(reward_fn, replies, examples))
        texts = replies if tasks is None else [r if k is None else correction_solution(k, e.question, a, r)
                                               for k, e, a, r in zip(tasks, examples, texts, replies)]
        tokens.append(np.array([len(x) for x in ids], np.int64))
    return CorrectionResult(np.stack(correct), np.stack(tokens), replies, np.stack(read), np.stack(new_read))


def check_tasks(examples: Sequence) -> list:
    """Each example's testbed task when it writes a worked check (from the example's meta source), else None:
    what `correction_solution` reads a "worked_check" reply with. A reply to a question of any other task (a math
    problem, whose check has no fixed layout) is reviewed whole in the next round."""
    tasks = []
    for e in examples:
        source = (getattr(e, "meta", None) or {}).get("source")
        task = task_of(source) if source in TASK_MODULES else None
        tasks.append(task if task is not None and task.check_text is not None else None)
    return tasks


def correct_buggy_programs(generate: Generate, tokenizer, problems: Sequence[CorrectionProblem], reward_fn, *,
                           rounds: int = 1, max_new_tokens: int = 512) -> CorrectionResult:
    """DebugBench-style evaluation: each problem's buggy program (wrong by construction: the sandbox failed it)
    is the round-0 attempt, fenced as the model writes code; corrections end in one fenced python block.
    `reward_fn` is `data.code_datasets.code_example_reward` (the sandbox)."""
    examples = as_examples(problems)
    attempts = [f"```python\n{p.buggy_program.strip()}\n```" for p in problems]
    return self_correct(generate, tokenizer, examples, attempts, reward_fn, rounds=rounds,
                        max_new_tokens=max_new_tokens, answer_instruction=CODE_INSTRUCTION,
                        attempt_correct=[False] * len(problems))


def math_example_reward(texts: Sequence[str], examples: Sequence):
    """The math verifier on Examples: the last \\boxed{} of each text against `example.answer`."""
    return math_reward(list(texts), [e.answer for e in examples])


def evaluate_correction(model, tokenizer, examples: Sequence, *, rounds: int = 1, reward_fn=math_example_reward,
                        prompt_fn: Callable[[str], str] = solve_prompt, answer_instruction: str = SOLVE_INSTRUCTION,
                        max_new_tokens: int = 1024, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                        seed: int = 0, batch_size: int = 8, params=None, correction_format: str = "solution",
                        correction_max_new_tokens: Optional[int] = None, conversation: bool = False) -> dict:
    """The model's own attempts (one per example from `prompt_fn(question)`), then `rounds` correction rounds;
    the `CorrectionResult.summary()` dict plus the solve tokens per example (`correct/round0/tokens_per_example`)
    and "correct" ([R + 1][N] 0/1: each example's standing attempt after each round, for per-question analysis).
    For an evaluation script: `results["correction"] = evaluate_correction(model, tokenizer, examples, rounds=R)`.
    correction_format / correction_max_new_tokens: the corrections' prompt (`self_correct`) and budget (default
    `max_new_tokens`, the first attempts'; a correction that writes a check first needs room for it);
    conversation: the rounds as turns of one conversation after the attempt (`self_correct`)."""
    generate = make_generate(model, tokenizer, params=params, temperature=temperature, top_p=top_p, top_k=top_k,
                             seed=seed, batch_size=batch_size)
    prompts = tokenizer.encode_ragged([tokenizer.render_prompt(prompt_fn(e.question)) for e in examples])
    ids = generate(prompts, max_new_tokens=max_new_tokens)
    attempts = decode_ids(tokenizer, ids)
    res = self_correct(generate, tokenizer, examples, attempts, reward_fn, rounds=rounds,
                       max_new_tokens=correction_max_new_tokens or max_new_tokens,
                       answer_instruction=answer_instruction, correction_format=correction_format,
                       conversation=prompts if conversation else None)
    out = res.summary()
    out["correct/round0/tokens_per_example"] = float(np.mean([len(x) for x in ids])) if len(ids) else 0.0
    out["rows"] = res.rows(round0_tokens=out["correct/round0/tokens_per_example"])
    out["correct"] = res.correct.astype(int).tolist()
    out["correction_format"] = correction_format
    out["as_conversation"] = bool(conversation)
    out["turn_tokens"] = {"generated": res.tokens.mean(axis=1).tolist(), "prompt": res.prompt_tokens.mean(axis=1)
                          .tolist(), "new_prompt": res.new_prompt_tokens.mean(axis=1).tolist()}
    return out


def evaluate_debug_bench(model, tokenizer, problems: Sequence[CorrectionProblem], *, rounds: int = 1,
                         max_new_tokens: int = 1024, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                         seed: int = 0, batch_size: int = 8, reward_fn=None, params=None) -> dict:
    """`correct_buggy_programs` for a model: the `CorrectionResult.summary()` dict, its per-round `rows` (round 0,
    the given buggy programs, costs no tokens and is wrong by construction, so `fix_rate` is the share repaired
    and `break_rate` stays nan until a round has right programs to break), the problem count and its bug kinds.
    `reward_fn`: `data.code_datasets.code_example_reward` (the sandbox) unless given."""
    if not problems:
        raise ValueError("evaluate_debug_bench: no problems; a DebugBench set needs at least one buggy program")
    if reward_fn is None:
        from jaxrl_reason.data.code_datasets import code_example_reward as reward_fn
    generate = make_generate(model, tokenizer, params=params, temperature=temperature, top_p=top_p, top_k=top_k,
                             seed=seed, batch_size=batch_size)
    res = correct_buggy_programs(generate, tokenizer, problems, reward_fn, rounds=rounds,
                                 max_new_tokens=max_new_tokens)
    kinds: dict = {}
    for p in problems:  # a generated mutant's bug is "binop: Add -> Sub ...": its kind is the part before ":"
        kind = p.bug.split(":")[0].strip() or "unknown"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {**res.summary(), "rows": res.rows(), "problems": len(problems), "bug_kinds": kinds}
