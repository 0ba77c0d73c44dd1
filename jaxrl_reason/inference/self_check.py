"""Test time for a self-checking policy (docs/methods/union.md#test-time): the union `self_check` solves, verifies,
critiques and corrects, and each of those skills is a way to spend tokens on a question.

  critique score     CURE's verdict read as a score, no generation: the probability that the critique's verdict
                     field says "no error", read after the critique prompt and the verdict field's name
                     (`critique_logprobs`); usable wherever the RL^V score is (Best-of-N, weighted vote)
  combined           sample N, score each with the model's own verifier, revise the low-scored ones (CURE's
                     critique + guided re-solve, or CIPO's correction), then a weighted vote over originals and
                     revisions by the same score (`combined_strategy`)
  matched budgets    every strategy's accuracy at 1x, 2x, 4x, 8x the mean tokens of one sample (`matched_budgets`)

[choice] What "P(verdict = True)" is. The critique's first field is ERROR_FOUND: true|false, and training writes it
as the reply's first tokens (`prompts.critique_verdict_prefix`, encoded on its own after the rendered prompt). The
two verdict lines share a head ("ERROR_FOUND:") and part at one token; the score of a solution is the probability
of the "false" branch at that token -- the critic's verdict that the solution is right, the same direction as the
verifier's P(Yes) -- or with `normalize` P(false) / (P(false) + P(true)). Only the fields format has the verdict
first; a worked_check critique writes its check before it, and is refused here.

[choice] Tokens: every generated token counts (the pool's samples, critiques, re-solves, corrections, a written
check); prefills (verify and critique prompts) are reported apart as "prefill" tokens and do not buy budget.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from jaxrl_reason.data.prompts import critique_prompt, critique_verdict_prefix
from jaxrl_reason.inference import estimators as est
from jaxrl_reason.inference.diagnostics import verifier_quality, vote_headroom
from jaxrl_reason.inference.test_time import accuracy_curves, weighted_vote
from jaxrl_reason.inference.verifier import scores_from_logprobs, verdict_logprobs, verify_inputs, verify_prompts
from jaxrl_reason.rewards.math import equivalence_classes
from jaxrl_reason.rl.scoring import token_logprobs_at_end

COMBINED_REVISE = ("refine", "correct")
COMBINED_SCORES = ("verify", "critique")
BUDGET_MULTIPLES = (1, 2, 4, 8)
# A setting fits a budget up to this fraction over it [choice]: a budget's unit is one pool sample's mean length,
# and a round that writes one more solution costs another sample of a slightly different mean (46.004 tokens
# against a 2x budget of 45.997 on the testbed): exact equality would drop it for a rounding-sized difference.
BUDGET_SLACK = 0.05
# Labels of the pool strategies the critique score adds (test_time.STRATEGY_LABELS holds the verifier's).
CRITIQUE_LABELS = {"best_of_n_critique": "BoN@k (critique)", "weighted_critique": "weighted@k (critique)"}


class CritiqueVerdictIds(NamedTuple):
    """head: the token ids both verdict lines start with; right / wrong: the first ids where "ERROR_FOUND: false"
    (the solution is right) and "ERROR_FOUND: true" part."""

    head: list
    right: int
    wrong: int


def critique_verdict_ids(tokenizer) -> CritiqueVerdictIds:
    """Where the two teacher-forced verdict lines part, in this tokenizer; refused when they never do."""
    wrong, right = tokenizer.encode(critique_verdict_prefix(True)), tokenizer.encode(critique_verdict_prefix(False))
    i = 0
    while i < min(len(wrong), len(right)) and wrong[i] == right[i]:
        i += 1
    if i == len(wrong) or i == len(right):
        raise ValueError("the critique verdict lines encode with one a prefix of the other; the critique score needs "
                         "a token where 'true' and 'false' part")
    return CritiqueVerdictIds(list(right[:i]), int(right[i]), int(wrong[i]))


def critique_inputs(tokenizer, questions: Sequence[str], solutions: Sequence[str], *, critique_format: str = "fields",
                    wording: str = "short") -> list:
    """Token ids the verdict is read after: each rendered critique prompt, then the verdict lines' shared head."""
    if critique_format != "fields":
        raise ValueError(f"critique score: critique_format={critique_format!r} writes a check before its verdict, "
                         "so no verdict can be read off the prompt; use a run trained with critique_format=fields or "
                         "score with the verifier (score=verify)")
    if len(questions) != len(solutions):
        raise ValueError(f"critique_inputs: {len(questions)} questions for {len(solutions)} solutions; give one each")
    ids = critique_verdict_ids(tokenizer)
    prompts = tokenizer.encode_ragged([tokenizer.render_prompt(critique_prompt(q, s, "fields", wording))
                                       for q, s in zip(questions, solutions)])
    return [list(p) + ids.head for p in prompts]


def critique_logprobs(model, tokenizer, questions: Sequence[str], solutions: Sequence[str], *,
                      critique_format: str = "fields", wording: str = "short", batch_size: int = 32, state=None,
                      inputs: Optional[list] = None) -> np.ndarray:
    """[N, 2] float32: log P(verdict "no error"), log P(verdict "error") at the token where the verdicts part (the
    order of `verifier.verdict_logprobs`'s Yes / No, so `scores_from_logprobs` reads either)."""
    ids = critique_verdict_ids(tokenizer)
    if inputs is None:
        inputs = critique_inputs(tokenizer, questions, solutions, critique_format=critique_format, wording=wording)
    return token_logprobs_at_end(model, inputs, [ids.right, ids.wrong], batch_size=batch_size,
                                 pad_id=tokenizer.pad_id, state=state)


class OwnScorer(NamedTuple):
    """The model as its own scorer: `scores(questions, solutions) -> (float [N], prefill tokens [N], generated
    tokens [N])` (generated: a verifier's written check)."""

    name: str
    scores: Callable


def own_scorer(model, tokenizer, kind: str, *, normalize: bool = False, batch_size: int = 32,
               check_tokens: int = 0, critique_format: str = "fields", wording: str = "short") -> OwnScorer:
    """The RL^V score (kind="verify": P(Yes) after the verify prompt, after a written check with check_tokens > 0)
    or the critique score (kind="critique")."""
    if kind not in COMBINED_SCORES:
        raise ValueError(f"score must be one of {' | '.join(COMBINED_SCORES)}, got {kind!r}")

    def scores(questions, solutions):
        if not len(solutions):
            return np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        if kind == "verify":
            inputs = verify_inputs(model, tokenizer, questions, solutions, check_tokens=check_tokens,
                                   batch_size=batch_size)
            lp = verdict_logprobs(model, tokenizer, questions, solutions, batch_size=batch_size, inputs=inputs)
            written = np.array([len(i) - len(p) for i, p in zip(inputs, verify_prompts(tokenizer, questions,
                                                                                        solutions))], np.int64)
        else:
            inputs = critique_inputs(tokenizer, questions, solutions, critique_format=critique_format,
                                     wording=wording)
            lp = critique_logprobs(model, tokenizer, questions, solutions, batch_size=batch_size, inputs=inputs)
            written = np.zeros(len(inputs), np.int64)
        prefill = np.array([len(i) for i in inputs], np.int64) - written
        return scores_from_logprobs(lp, normalize=normalize), prefill, written

    return OwnScorer(kind, scores)


def add_critique_scores(results: dict, model, tokenizer, *, critique_format: str = "fields", wording: str = "short",
                        normalize: bool = False, batch_size: int = 32) -> None:
    """Scores a `test_time.evaluate` pool (with samples) with the critique verdict, in place: samples' scores
    ["critique"], strategies best_of_n_critique / weighted_critique at every k, the score's quality and vote
    headroom, and its prompt tokens per question ("critique_prompt", a prefill)."""
    rows = results["samples"]
    q, n = len(rows), results["n"]
    questions = [r["question"] for r in rows for _ in range(n)]
    solutions = [c for r in rows for c in r["completions"]]
    inputs = critique_inputs(tokenizer, questions, solutions, critique_format=critique_format, wording=wording)
    lp = critique_logprobs(model, tokenizer, questions, solutions, batch_size=batch_size, inputs=inputs)
    s = scores_from_logprobs(lp, normalize=normalize).reshape(q, n)
    correct = np.array([r["correct"] for r in rows], np.float64)
    classes = np.array([r["classes"] for r in rows], np.int64)
    curves = accuracy_curves(correct, classes, results["ks"], scores={"critique": s},
                             num_subsets=results["num_subsets"], seed=results["config"]["seed"])
    results["strategies"].update({k: curves[k] for k in CRITIQUE_LABELS})
    results["verifier"]["critique"] = verifier_quality(s, correct)
    results["vote_headroom"]["critique"] = vote_headroom(correct, classes, s)
    mean_prompt = float(np.mean([len(i) for i in inputs]))
    results["tokens_per_question"]["critique_prompt"] = [k * mean_prompt for k in results["ks"]]
    lp = lp.reshape(q, n, 2)
    for i, r in enumerate(rows):
        r["scores"]["critique"] = s[i].tolist()
        r["logprob_yes_no"]["critique"] = lp[i].tolist()


# ---------------------------------------------------------------------------------------------------------------
# The combined strategy
# ---------------------------------------------------------------------------------------------------------------
def select_low(scores: np.ndarray, k: int, *, threshold: float, bottom: float) -> np.ndarray:
    """bool [k]: which of a question's first k samples are revised -- score <= threshold, or with bottom > 0 the
    ceil(bottom * k) lowest-scored (ties: the earlier sample first)."""
    s = np.asarray(scores, np.float64)[:k]
    if bottom > 0:
        take = np.zeros(k, bool)
        take[np.argsort(s, kind="stable")[:int(math.ceil(bottom * k))]] = True
        return take
    return s <= threshold


def combined_strategy(model, tokenizer, examples: Sequence[Any], reward_fn: Callable, pool: dict, *,
                      scorer: OwnScorer, revise: Callable, n: int, ks: Sequence[int], threshold: float = 0.5,
                      bottom: float = 0.0, grader=None) -> dict:
    """Sample N (the first `n` of each question's pool samples), score each with `scorer`, revise the low-scored
    ones (`select_low`) with `revise(examples, texts, correct) -> (texts, tokens [M], revised bool [M])` (a
    critique that finds no error leaves no revision: revised False), score the revisions, and take the weighted
    vote (`test_time.weighted_vote`, ties to the earlier candidate) over originals then revisions, by the score.

    At each k in `ks` the vote runs over the first k samples and the revisions of those `select_low` picks at k, so
    one revision serves every k (threshold: a sample's pick does not depend on k; bottom: the union over k is
    revised once). Rows: {"k", "acc", "tokens" (generated per question: the k samples, the critiques, re-solves
    or corrections, a verifier's written checks), "prefill" (verifier / critique prompt tokens), "revised" (share
    of the k samples sent to revision), "per_question" (0/1)}."""
    rows_in = pool["samples"]
    q = len(rows_in)
    if q != len(examples):
        raise ValueError(f"combined_strategy: {q} pool questions for {len(examples)} examples")
    if n > pool["n"] or max(ks) > n:
        raise ValueError(f"combined_strategy: n={n} and ks={list(ks)} must fit the pool's {pool['n']} samples")
    texts = [r["completions"][:n] for r in rows_in]
    lengths = np.array([r["lengths"][:n] for r in rows_in], np.int64)
    correct = np.array([r["correct"][:n] for r in rows_in], np.float64)
    answers = [list(r["answers"][:n]) for r in rows_in]
    flat_q = [e.question for e in examples for _ in range(n)]
    s, prefill, written = scorer.scores(flat_q, [t for ts in texts for t in ts])
    s, prefill, written = s.reshape(q, n), prefill.reshape(q, n), written.reshape(q, n)
    picks = {k: np.stack([select_low(s[i], k, threshold=threshold, bottom=bottom) for i in range(q)]) for k in ks}
    todo = np.zeros((q, n), bool)
    for k, p in picks.items():
        todo[:, :k] |= p
    idx = [(i, j) for i in range(q) for j in range(n) if todo[i, j]]
    rev = {}
    if idx:
        r_texts, r_tokens, r_made = revise([examples[i] for i, _ in idx], [texts[i][j] for i, j in idx],
                                           [correct[i, j] > 0.5 for i, j in idx])
        made = [m for m, ok in enumerate(r_made) if ok]
        graded = reward_fn([r_texts[m] for m in made], [examples[idx[m][0]] for m in made]) if made else None
        r_s, r_pre, r_wr = scorer.scores([examples[idx[m][0]].question for m in made], [r_texts[m] for m in made])
        for m, (i, j) in enumerate(idx):
            rev[i, j] = {"tokens": int(r_tokens[m]), "made": bool(r_made[m])}
        for pos, m in enumerate(made):
            rev[idx[m]].update(answer=graded.details[pos].get("extracted"), correct=float(graded.scores[pos]),
                               score=float(r_s[pos]), prefill=int(r_pre[pos]), written=int(r_wr[pos]))
    out_rows = []
    for k in ks:
        per_q, tokens, pre, share = [], [], [], []
        for i in range(q):
            a, sc, c = list(answers[i][:k]), list(s[i, :k]), list(correct[i, :k])
            tok = int(lengths[i, :k].sum() + written[i, :k].sum())
            pf = int(prefill[i, :k].sum())
            for j in np.flatnonzero(picks[k][i]):
                r = rev[i, int(j)]
                tok += r["tokens"]
                if r["made"]:
                    a.append(r["answer"])
                    sc.append(r["score"])
                    c.append(r["correct"])
                    tok += r["written"]
                    pf += r["prefill"]
            cls = equivalence_classes(a, grader=grader)
            choice = weighted_vote(a, sc, classes=cls, correct=c)
            per_q.append(int(bool(choice.correct)))
            tokens.append(tok)
            pre.append(pf)
            share.append(float(picks[k][i].mean()))
        out_rows.append({"k": int(k), "acc": float(np.mean(per_q)), "tokens": float(np.mean(tokens)),
                         "prefill": float(np.mean(pre)), "revised": float(np.mean(share)), "per_question": per_q})
    return {"rows": out_rows, "revisions": len(idx), "revisions_made": int(sum(r["made"] for r in rev.values()))}


def refine_reviser(model, tokenizer, reward_fn: Callable, *, max_new_tokens: int, critique_max_new_tokens=None,
                   guided_layout: str = "after", critique_format: str = "fields", wording: str = "short",
                   generate=None, conversation: bool = False) -> Callable:
    """CURE's revision for `combined_strategy`: one round of `refine.self_refine` from the given solution (critique,
    then the guided re-solve unless the verdict says no error, which leaves no revision)."""
    from jaxrl_reason.inference.refine import VERDICT_NO_ERROR, self_refine

    def revise(examples, texts, correct):
        res = self_refine(model, tokenizer, examples, reward_fn, rounds=1, max_new_tokens=max_new_tokens,
                          critique_max_new_tokens=critique_max_new_tokens, generate=generate, initial=list(texts),
                          initial_tokens=[0] * len(texts), guided_layout=guided_layout,
                          critique_format=critique_format, prompt_wording=wording, conversation=conversation)
        return list(res.solutions), res.tokens[1].tolist(), (res.verdicts[0] != VERDICT_NO_ERROR).tolist()

    return revise


def correct_reviser(tokenizer, reward_fn: Callable, *, generate, max_new_tokens: int, answer_instruction: str,
                    correction_format: str = "solution", conversation: bool = False) -> Callable:
    """CIPO's revision for `combined_strategy`: one `correction.self_correct` round of the given attempt (with
    `conversation`, as the user turn after the pool's solve prompt and the attempt)."""
    from jaxrl_reason.data.prompts import solve_prompt
    from jaxrl_reason.inference.correction import self_correct

    def revise(examples, texts, correct):
        first = (tokenizer.encode_ragged([tokenizer.render_prompt(solve_prompt(e.question)) for e in examples])
                 if conversation else None)
        res = self_correct(generate, tokenizer, examples, list(texts), reward_fn, rounds=1,
                           max_new_tokens=max_new_tokens, answer_instruction=answer_instruction,
                           attempt_correct=list(correct), correction_format=correction_format,
                           conversation=first)
        return list(res.texts), res.tokens[1].tolist(), [True] * len(texts)

    return revise


# ---------------------------------------------------------------------------------------------------------------
# Matched budgets
# ---------------------------------------------------------------------------------------------------------------
def _vote_per_question(results: dict, name: str, k: int) -> list:
    """Per-question values of pool strategy `name` at k, the estimators `accuracy_curves` averages (same seeds)."""
    rows, seed, m = results["samples"], results["config"]["seed"], results["num_subsets"]
    out = []
    for i, r in enumerate(rows):
        if name == "majority":
            out.append(est.majority_at_k(r["classes"], r["correct"], k, num_subsets=m, seed=(seed, i, k)).mean)
            continue
        if name.startswith("best_of_n"):
            verifier = name[len("best_of_n_"):] or "self"
            out.append(est.best_of_k(r["scores"][verifier], r["correct"], k))
        else:
            verifier = name[len("weighted_"):] or "self"
            out.append(est.weighted_at_k(r["classes"], r["scores"][verifier], r["correct"], k, num_subsets=m,
                                         seed=(seed, i, k)).mean)
    return [float(v) for v in out]


def strategy_points(results: dict) -> dict:
    """{strategy: [{"point", "tokens", "acc", "values"}]}: every strategy of an evaluation (with samples) that
    spends generated tokens, one entry per setting it ran (k, round), tokens = mean generated per question;
    `values` is a callable giving the per-question values (computed only where a budget lands)."""
    from jaxrl_reason.inference.test_time import STRATEGY_LABELS

    labels = {**STRATEGY_LABELS, **CRITIQUE_LABELS}
    pts: dict = {}
    unit = results["mean_completion_tokens"]
    for name in results.get("strategies", {}):
        if name == "pass":  # an oracle over k samples, not a strategy a model can run
            continue
        pts[labels.get(name, name)] = [
            {"point": f"k={k}", "tokens": k * unit, "acc": results["strategies"][name]["mean"][j],
             "values": (lambda name=name, k=k: _vote_per_question(results, name, k))}
            for j, k in enumerate(results["ks"])]
    # Round 0 of refinement and correction is one plain sample (the pool's k=1 stands for it): a round strategy's
    # settings start at its first round, so that a single sample's noise is not scored as the strategy.
    if "refinement" in results:
        per = results["refinement"]["per_example"]["correct"]
        pts["self-refinement"] = [{"point": f"round={r['round']}", "tokens": r["tokens"], "acc": r["acc"],
                                   "values": (lambda t=r["round"], per=per: [float(v) for v in per[t]])}
                                  for r in results["refinement"]["rows"] if r["round"] > 0]
    if "correction" in results:
        per = results["correction"]["correct"]
        # Its round 0 is the one greedy attempt per question (an evaluation's correction runs greedy): a strategy
        # of its own at one sample's tokens.
        pts["greedy"] = [{"point": "k=1", "tokens": r["tokens"], "acc": r["acc"],
                          "values": (lambda per=per: [float(v) for v in per[0]])}
                         for r in results["correction"]["rows"] if r["round"] == 0]
        pts["self-correction"] = [{"point": f"round={r['round']}", "tokens": r["tokens"], "acc": r["acc"],
                                   "values": (lambda t=r["round"], per=per: [float(v) for v in per[t]])}
                                  for r in results["correction"]["rows"] if r["round"] > 0]
    if "combined" in results:
        pts[combined_label(results["combined"]["config"])] = [
            {"point": f"k={r['k']}", "tokens": r["tokens"], "acc": r["acc"],
             "values": (lambda r=r: [float(v) for v in r["per_question"]])} for r in results["combined"]["rows"]]
    return pts


def combined_label(config: dict) -> str:
    """The combined strategy's name in tables and plots: its score, what revises, and which samples."""
    pick = f"bottom {config['bottom']:g}" if config["bottom"] > 0 else f"score <= {config['threshold']:g}"
    return f"combined ({config['score']}, {config['revise']} {pick})"


def matched_budgets(results: dict, multiples: Sequence[int] = BUDGET_MULTIPLES, *,
                    slack: float = BUDGET_SLACK) -> dict:
    """Each strategy at budgets B = m x (mean generated tokens of one pool sample), m in `multiples`: its setting
    with the most mean generated tokens per question that stays <= B x (1 + slack) (`BUDGET_SLACK`); none fits:
    acc None. -> {"unit_tokens", "multiples", "rule", "slack", "table": {strategy: [{"multiple", "budget",
    "point", "tokens", "acc"}]}, "per_question": {strategy: {str(multiple): [values]}}}."""
    if not 0 <= slack < 1:
        raise ValueError(f"matched_budgets: slack must lie in [0, 1), got {slack}")
    unit = float(results["mean_completion_tokens"])
    table, per_q = {}, {}
    for name, pts in strategy_points(results).items():
        table[name], per_q[name] = [], {}
        for m in multiples:
            budget = m * unit
            fit = [p for p in pts if p["tokens"] <= budget * (1 + slack) * (1 + 1e-9)]
            if not fit or unit <= 0:
                table[name].append({"multiple": int(m), "budget": budget, "point": None, "tokens": None, "acc": None})
                continue
            best = max(fit, key=lambda p: p["tokens"])
            values = best["values"]()
            table[name].append({"multiple": int(m), "budget": budget, "point": best["point"],
                                "tokens": float(best["tokens"]), "acc": float(np.mean(values))})
            per_q[name][str(int(m))] = values
    return {"unit_tokens": unit, "multiples": [int(m) for m in multiples],
            "rule": f"the setting (k, round >= 1) with the most mean generated tokens per question <= the budget "
                    f"+ {slack:.0%}", "slack": slack,
            "table": table, "per_question": per_q}
