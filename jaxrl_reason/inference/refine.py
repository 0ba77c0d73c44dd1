"""Test-time iterative self-refinement (docs/methods/cure.md#spec-test-time), the loop a CURE policy is trained for.

    round 0:  solve x                                       -> y_0
    round t:  critique y_{t-1} (verdict generated, not forced)
              ERROR_FOUND: false  -> x is settled, y_{t-1} stays its answer for every later round
              otherwise           -> y_t = solve guided_prompt(x, hint)   (y_{t-1} is not shown)

[choice] A critique whose verdict cannot be parsed counts as "error found": the loop only stops on an explicit
"no error", and for the verdict metrics an unparsed verdict is a claim of an error.

Self-verification metrics score each round's verdicts against the verifier's judgement of the solution they
judged; the positive class is "the solution is wrong" (a verdict of ERROR_FOUND: true is a positive prediction).

Any generator works: `generate(prompt_token_lists, *, max_new_tokens) -> completion token lists` (a stub in
tests, `make_generate(model, tokenizer, ...)` for a model).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from jaxrl_reason.data.prompts import (CRITIQUE_FORMATS, GUIDED_LAYOUTS, critique_prompt, guided_prompt, parse_critique,
                                       solve_prompt)

Generate = Callable[..., list]  # (prompts: list[list[int]], *, max_new_tokens: int) -> list[list[int]]

VERDICT_ERROR, VERDICT_NO_ERROR, VERDICT_UNPARSED, NOT_CRITIQUED = 1, 0, -1, -2


class RefineResult(NamedTuple):
    """The trajectory of every example through `rounds` (T) refinement rounds; N examples.

    correct:   bool  [T + 1, N]  correctness of the example's standing solution after round t (0 = first solve)
    tokens:    int64 [T + 1, N]  tokens generated for the example in round t (round 0: the solve; later rounds:
                                 the critique plus, unless it said no error, the guided re-solve)
    verdicts:  int8  [T, N]      verdict of round t + 1's critique of the solution after round t: VERDICT_ERROR (1),
                                 VERDICT_NO_ERROR (0), VERDICT_UNPARSED (-1), NOT_CRITIQUED (-2, settled earlier)
    stopped:   int64 [N]         the round whose critique said no error; -1 if none did
    solutions: [N] the standing solution texts after the last round
    critiques: [N] the last critique text of each example ("" if never critiqued)
    well_formed: bool [T, N] round t + 1's critique parsed with every field and no format error (False where
                 not critiqued)
    turns:     per turn of round t + 1, int64 [T, N] each: "critique" / "resolve" tokens generated, "prompt"
               tokens the model read before them (both turns' prompts; as one conversation: the whole
               conversation up to that turn) and "new_prompt" (as one conversation: only the new turns' tokens, what
               a prefill continuing from the KV cache would read); None when not recorded
    """

    correct: np.ndarray
    tokens: np.ndarray
    verdicts: np.ndarray
    stopped: np.ndarray
    solutions: list
    critiques: list
    well_formed: np.ndarray
    turns: Optional[dict] = None

    def per_example(self) -> dict:
        """The per-example arrays as JSON-ready lists (correct, tokens, verdicts, stopped, well_formed): what a
        paired comparison of two runs on the same examples resamples (`from_per_example`, `take`)."""
        return {k: np.asarray(getattr(self, k)).astype(int).tolist()
                for k in ("correct", "tokens", "verdicts", "stopped", "well_formed")}

    @classmethod
    def from_per_example(cls, arrays: dict) -> "RefineResult":
        """The result `per_example` wrote, without its texts."""
        correct = np.asarray(arrays["correct"], bool)
        n = correct.shape[1]
        return cls(correct=correct, tokens=np.asarray(arrays["tokens"], np.int64),
                   verdicts=np.asarray(arrays["verdicts"], np.int8), stopped=np.asarray(arrays["stopped"], np.int64),
                   solutions=[""] * n, critiques=[""] * n, well_formed=np.asarray(arrays["well_formed"], bool))

    def take(self, idx) -> "RefineResult":
        """The result over examples `idx` (repeats allowed: a bootstrap draw)."""
        idx = np.asarray(idx, np.int64)
        return RefineResult(correct=self.correct[:, idx], tokens=self.tokens[:, idx], verdicts=self.verdicts[:, idx],
                            stopped=self.stopped[idx], solutions=[self.solutions[i] for i in idx],
                            critiques=[self.critiques[i] for i in idx], well_formed=self.well_formed[:, idx])

    @property
    def accuracy(self) -> np.ndarray:
        """float [T + 1]: accuracy after each round."""
        return self.correct.mean(axis=1)

    @property
    def tokens_per_example(self) -> np.ndarray:
        """float [T + 1]: mean tokens generated per example up to and including each round."""
        return np.cumsum(self.tokens.sum(axis=1)) / max(self.correct.shape[1], 1)

    def verdict_metrics(self, round_index: Optional[int] = None, *, strict: bool = False) -> dict:
        """precision / recall / F1 / accuracy of the error verdicts (positive class: the solution is wrong), over
        round `round_index` (1-based) or pooled over all rounds; `critiqued` counts the verdicts scored.

        An unparsed verdict is a claim of an error (the loop's rule), which flatters a critic that never writes a
        verdict when most solutions are wrong; `strict` scores it as the wrong call instead (a miss on a wrong
        solution, a false alarm on a right one), the number to compare critics by."""
        rounds = range(self.verdicts.shape[0]) if round_index is None else [round_index - 1]
        pred, truth = [], []
        for r in rounds:
            seen = self.verdicts[r] != NOT_CRITIQUED
            wrong = ~self.correct[r][seen]
            p = self.verdicts[r][seen] != VERDICT_NO_ERROR
            if strict:
                p = np.where(self.verdicts[r][seen] == VERDICT_UNPARSED, ~wrong, p)
            pred.append(p)
            truth.append(wrong)
        return verdict_scores(np.concatenate(pred) if pred else np.zeros(0, bool),
                              np.concatenate(truth) if truth else np.zeros(0, bool))

    def verdict_parsed_share(self, round_index: Optional[int] = None) -> float:
        """Share of the critiques of round `round_index` (1-based; default all) whose verdict parsed."""
        rounds = slice(None) if round_index is None else slice(round_index - 1, round_index)
        v = self.verdicts[rounds]
        seen = v != NOT_CRITIQUED
        return float((v[seen] != VERDICT_UNPARSED).mean()) if seen.any() else 0.0

    def well_formed_share(self, round_index: Optional[int] = None) -> float:
        """Share of the critiques written in round `round_index` (1-based; default: all rounds) that are
        well-formed; 0.0 when none was written."""
        rounds = slice(None) if round_index is None else slice(round_index - 1, round_index)
        seen = self.verdicts[rounds] != NOT_CRITIQUED
        return float(self.well_formed[rounds][seen].mean()) if seen.any() else 0.0

    def summary(self) -> dict:
        """Flat dict for logging: accuracy and cumulative tokens per round, per-round and pooled verdict F1."""
        out = {}
        for t, (a, n) in enumerate(zip(self.accuracy, self.tokens_per_example)):
            out[f"refine/round{t}/accuracy"] = float(a)
            out[f"refine/round{t}/tokens_per_example"] = float(n)
            if t:
                out[f"refine/round{t}/critiqued"] = int(np.sum(self.verdicts[t - 1] != NOT_CRITIQUED))
                out[f"refine/round{t}/verdict_f1"] = self.verdict_metrics(t)["f1"]
                out[f"refine/round{t}/well_formed"] = self.well_formed_share(t)
        pooled = self.verdict_metrics()
        out.update({f"refine/verdict_{k}": v for k, v in pooled.items()})
        out["refine/well_formed"] = self.well_formed_share()
        out["refine/settled_frac"] = float(np.mean(self.stopped >= 0))
        return out


def verdict_scores(pred_error: np.ndarray, is_wrong: np.ndarray) -> dict:
    """Binary detection scores with 'wrong solution' as the positive class. Empty inputs give zeros."""
    pred_error, is_wrong = np.asarray(pred_error, bool), np.asarray(is_wrong, bool)
    if pred_error.shape != is_wrong.shape:
        raise ValueError(f"verdict_scores: predictions {pred_error.shape} and labels {is_wrong.shape} differ")
    tp = int(np.sum(pred_error & is_wrong))
    fp = int(np.sum(pred_error & ~is_wrong))
    fn = int(np.sum(~pred_error & is_wrong))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    acc = float(np.mean(pred_error == is_wrong)) if pred_error.size else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": acc, "critiqued": int(pred_error.size)}


def make_generate(model, tokenizer, *, params=None, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                  seed: int = 0, batch_size: int = 64, mesh=None) -> Generate:
    """A `generate` for `self_refine` from a model: batches of `batch_size` prompts, one sample each, stopping at
    the tokenizer's stop ids. Each call draws from a fresh key (seed, call number, batch start)."""
    from jaxrl_reason.sampling.sampler import sample

    if batch_size < 1:
        raise ValueError(f"make_generate: batch_size must be >= 1, got {batch_size}")
    key = jax.random.PRNGKey(seed)
    calls = [0]

    def generate(prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list:
        calls[0] += 1
        out = []
        for start in range(0, len(prompts), batch_size):
            k = jax.random.fold_in(jax.random.fold_in(key, calls[0]), start)
            o = sample(model, list(prompts[start:start + batch_size]), k, max_new_tokens=max_new_tokens,
                       temperature=temperature, top_p=top_p, top_k=top_k, stop_token_ids=tokenizer.stop_ids,
                       pad_id=tokenizer.pad_id, state=params, mesh=mesh)
            out.extend(o.completions())
        return out

    return generate


def next_turn(tokenizer, history: Sequence[int], user_text: str, stop_ids: Sequence[int] = ()) -> list:
    """Token ids of a conversation continued by a user turn: `history` (a rendered prompt and the model's replies;
    a trailing stop id dropped, since the template's end of turn follows), the chat template's end of the model's
    turn, `user_text` as a user turn, and the start of the model's next reply (`Tokenizer.render_env_turn`)."""
    history = list(history)
    if history and history[-1] in set(stop_ids):
        history = history[:-1]
    return history + tokenizer.encode(tokenizer.render_env_turn(user_text, role="user"))


def decode_ids(tokenizer, ids: Sequence[Sequence[int]]) -> list:
    """Generated token ids [rows][time] -> their texts, special tokens dropped."""
    return [tokenizer.decode(list(x), skip_special_tokens=True) for x in ids]


def graded_right(reward_fn, texts: Sequence[str], examples: Sequence[Any]) -> np.ndarray:
    """reward_fn over (texts, examples) -> bool [rows], True where the score passes 0.5."""
    if not texts:
        return np.zeros((0,), bool)
    s = np.asarray(reward_fn(list(texts), list(examples)).scores, np.float32)
    if s.shape != (len(texts),):
        raise ValueError(f"reward_fn returned {s.shape} scores for {len(texts)} texts; it must give one per text")
    return s > 0.5


def self_refine(model, tokenizer, examples: Sequence[Any], reward_fn: Callable, *, rounds: int,
                max_new_tokens: int, critique_max_new_tokens: Optional[int] = None, params=None,
                temperature: float = 0.0, seed: int = 0, batch_size: int = 64,
                generate: Optional[Generate] = None, prompt_fn: Callable[[str], str] = solve_prompt,
                min_hint_words: int = 10, initial: Optional[Sequence[str]] = None,
                initial_tokens: Optional[Sequence[int]] = None, guided_layout: str = "after",
                critique_format: str = "fields", prompt_wording: str = "short",
                conversation: bool = False) -> RefineResult:
    """Solve, then up to `rounds` rounds of self-critique and guided re-solving (see the module docstring).

    examples:  objects with `.question` (and whatever `reward_fn` reads, e.g. `.answer`)
    reward_fn: (texts, examples) -> RewardResult; a score > 0.5 is correct
    generate:  overrides the model (then `model` may be None); default `make_generate(model, tokenizer, ...)`
    critique_max_new_tokens: default `max_new_tokens`
    initial:   [N] round 0's solution texts, already sampled (e.g. one sample per question of an evaluation
               pool, so refinement and voting start from the same samples); default: generate them.
    initial_tokens: [N] the tokens generating `initial` took, round 0's cost (default: their encoded lengths).
    guided_layout: the re-solve prompt's layout (`prompts.guided_prompt`; a CURE run's data.guided_layout)
    critique_format: what the critique prompt asks for (`prompts.critique_prompt`; a run's data.critique_format);
    with "worked_check" the critique budget must hold the check as well
    prompt_wording: the critique and guided prompts' wording (`prompts.PROMPT_WORDINGS`; a run's data.prompt_wording)
    conversation: [choice] the rounds as turns of one conversation (`next_turn`): the critique prompt follows the
    solve prompt and the solution as the next user turn, the guided prompt follows the critique, the next round's
    critique follows the re-solve; each prompt is the one a CURE run trains on, now with the turns before it in
    context. Default: each a fresh single-turn prompt, as training renders them.
    """
    if rounds < 0:
        raise ValueError(f"self_refine: rounds must be >= 0, got {rounds}")
    if guided_layout not in GUIDED_LAYOUTS:
        raise ValueError(f"self_refine: guided_layout must be one of {GUIDED_LAYOUTS}, got {guided_layout!r}")
    if critique_format not in CRITIQUE_FORMATS:
        raise ValueError(f"self_refine: critique_format must be one of {CRITIQUE_FORMATS}, got {critique_format!r}")
    if max_new_tokens < 1:
        raise ValueError(f"self_refine: max_new_tokens must be >= 1, got {max_new_tokens}")
    if generate is None:
        if model is None:
            raise ValueError("self_refine needs a model or a `generate` function")
        generate = make_generate(model, tokenizer, params=params, temperature=temperature, seed=seed,
                                 batch_size=batch_size)
    crit_budget = critique_max_new_tokens or max_new_tokens
    examples = list(examples)
    n = len(examples)
    questions = [e.question for e in examples]
    render = lambda texts: tokenizer.encode_ragged([tokenizer.render_prompt(t) for t in texts]) if texts else []

    correct = np.zeros((rounds + 1, n), bool)
    tokens = np.zeros((rounds + 1, n), np.int64)
    verdicts = np.full((rounds, n), NOT_CRITIQUED, np.int8)
    stopped = np.full((n,), -1, np.int64)
    critiques = [""] * n
    well_formed = np.zeros((rounds, n), bool)

    turns = {k: np.zeros((rounds, n), np.int64) for k in ("critique", "resolve", "prompt", "new_prompt")}
    stops = tuple(tokenizer.stop_ids) if conversation else ()
    first = render([prompt_fn(q) for q in questions]) if initial is None or conversation else None
    if initial is not None:
        if len(initial) != n or (initial_tokens is not None and len(initial_tokens) != n):
            raise ValueError(f"self_refine: initial / initial_tokens hold {len(initial)} / "
                             f"{len(initial_tokens) if initial_tokens is not None else '-'} entries for {n} "
                             "examples; give one each")
        solutions = list(initial)
        tokens[0] = (initial_tokens if initial_tokens is not None
                     else [len(tokenizer.encode(t)) for t in solutions])
        history = [list(p) + tokenizer.encode(t) for p, t in zip(first, solutions)] if conversation else None
    else:
        ids = generate(first, max_new_tokens=max_new_tokens)
        solutions = decode_ids(tokenizer, ids)
        tokens[0] = [len(x) for x in ids]
        history = [list(p) + list(x) for p, x in zip(first, ids)] if conversation else None

    def ask(rows, texts):
        """The prompts of one turn for examples `rows`: fresh, or the conversation so far plus the new turn."""
        if not conversation:
            return render(texts)
        return [next_turn(tokenizer, history[i], t, stops) for i, t in zip(rows, texts)]

    def count(t, rows, prompts):
        for i, p in zip(rows, prompts):
            kept = len(history[i]) - int(bool(history[i]) and history[i][-1] in stops) if conversation else 0
            turns["prompt"][t - 1, i] += len(p)
            turns["new_prompt"][t - 1, i] += len(p) - kept
    correct[0] = graded_right(reward_fn, solutions, examples)

    for t in range(1, rounds + 1):
        correct[t] = correct[t - 1]
        active = np.flatnonzero(stopped < 0)
        if not len(active):
            continue
        c_prompts = ask(active, [critique_prompt(questions[i], solutions[i], critique_format, prompt_wording)
                                 for i in active])
        count(t, active, c_prompts)
        c_ids = generate(c_prompts, max_new_tokens=crit_budget)
        c_texts = decode_ids(tokenizer, c_ids)
        parsed = [parse_critique(c, min_hint_words=min_hint_words) for c in c_texts]
        redo = []
        for i, c_prompt, c_id, c_text, p in zip(active, c_prompts, c_ids, c_texts, parsed):
            tokens[t, i] += len(c_id)
            turns["critique"][t - 1, i] = len(c_id)
            if conversation:
                history[i] = list(c_prompt) + list(c_id)
            critiques[i] = c_text
            v = VERDICT_UNPARSED if p.error_found is None else (VERDICT_ERROR if p.error_found else VERDICT_NO_ERROR)
            verdicts[t - 1, i] = v
            well_formed[t - 1, i] = p.error_found is not None and not p.format_errors
            if v == VERDICT_NO_ERROR:
                stopped[i] = t
            else:
                redo.append((i, p.hint or ""))
        if not redo:
            continue
        rows = [i for i, _ in redo]
        r_prompts = ask(rows, [guided_prompt(questions[i], h, guided_layout, prompt_wording) for i, h in redo])
        count(t, rows, r_prompts)
        r_ids = generate(r_prompts, max_new_tokens=max_new_tokens)
        r_texts = decode_ids(tokenizer, r_ids)
        r_ok = graded_right(reward_fn, r_texts, [examples[i] for i, _ in redo])
        for (i, _), p, ids_i, text, ok in zip(redo, r_prompts, r_ids, r_texts, r_ok):
            tokens[t, i] += len(ids_i)
            turns["resolve"][t - 1, i] = len(ids_i)
            if conversation:
                history[i] = list(p) + list(ids_i)
            solutions[i] = text
            correct[t, i] = ok
    return RefineResult(correct, tokens, verdicts, stopped, solutions, critiques, well_formed, turns)
