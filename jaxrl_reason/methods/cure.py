"""CURE (METHODS.md §3): solve, critique with a teacher-forced verdict, guided re-exploration, replay.

One training iteration, from the step's solve rollouts (Q queries x K samples, accuracy acc(x)):

1. critique rows: samples of queries with acc(x) in `critique_acc_range`, balanced 1:1 correct / wrong. The
   prompt is `critique_prompt(x, y)`; the response starts with the outcome verifier's verdict
   `critique_verdict_prefix(y is wrong)` (teacher-forced) and the policy writes the remaining fields after it.
2. guided re-exploration: for each critique of a *wrong* y, `guided_samples` (M) solutions of
   `guided_prompt(x, hint)` -- the hint only, never y -- rewarded by the same verifier.
3. three PPO-clip tasks, each normalised over its own tokens and summed:
   solve         the K samples, plus the successful guided solutions of queries with acc(x) in
                 `replay_acc_range` re-attached to the *plain* solve prompt as extra group members; advantages on
                 the enlarged group; their pi_old recomputed under the plain prompt with the current params.
   critique      per-token advantage by segment: `verdict_advantage` on the forced verdict tokens,
                 c * (mean guided correctness - acc(x)) + format penalty on the generated rest (acc(x) from the
                 K plain samples only, replay excluded).
   guided_solve  one group per (x, hint) over its M samples.

Choices beyond METHODS.md, each a constructor knob:
- [choice] `critique_priority="low_acc"`: within each class, samples of lower-accuracy queries are critiqued
  first (zero-pass, then partial), random among ties -- only critiques of zero-pass queries can feed replay.
- [choice] the format penalty is added to the rest's advantage unscaled by c; a critique of a *correct* sample
  has no guided solutions and its rest gets the format penalty only (0 when well-formed).
- [choice] acc(x) and the guided mean use correctness (reward > 0.5); group advantages use the raw rewards.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np
from flax import nnx

from jaxrl_reason.data.prompts import (critique_format_penalty, critique_prompt, critique_verdict_prefix,
                                       guided_prompt, parse_critique)
from jaxrl_reason.methods.base import Context, Rollouts
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, group_advantages
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.rl.batch import TokenBatch, build_token_batch, concat_batches, pad_rows_to
from jaxrl_reason.rl.losses import TermSpec, kl_spec, pg_spec

CURE_TASKS = ("solve", "critique", "guided_solve")
# The paper run's loss: each task averaged over its own tokens, clip 0.2 / 0.28, dual-clip 10, no KL.
PAPER_LOSS = PolicyLossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.28, dual_clip=10.0, beta=0.0)
PRIORITIES = ("low_acc", "random")
BALANCES = ("subsample", "none")


# ------------------------------------------------------------------------------------------------ pure pieces


def query_accuracy(rewards: np.ndarray) -> np.ndarray:
    """[Q, K] rewards -> float [Q]: the share of a query's samples that are correct (reward > 0.5)."""
    rewards = np.asarray(rewards, np.float32)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [queries, samples], got shape {rewards.shape}")
    return (rewards > 0.5).mean(axis=1)


def _check_range(name: str, r) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in r)
    except (TypeError, ValueError):
        raise ValueError(f"cure {name} must be a pair (low, high) of accuracies in [0, 1], got {r!r}") from None
    if not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"cure {name}=({lo}, {hi}) must satisfy 0 <= low <= high <= 1")
    return lo, hi


def in_range(acc: np.ndarray, acc_range) -> np.ndarray:
    """bool [Q]: acc within the closed interval (a 1e-6 slack, so 0.9 admits 9/10 despite float rounding)."""
    lo, hi = acc_range
    acc = np.asarray(acc, np.float64)
    return (acc >= lo - 1e-6) & (acc <= hi + 1e-6)


def _ordered(rows: np.ndarray, acc_of_row: np.ndarray, rng: np.random.Generator, priority: str) -> np.ndarray:
    rows = rng.permutation(rows)
    if priority == "low_acc":
        rows = rows[np.argsort(acc_of_row[rows], kind="stable")]  # the random order survives among ties
    return rows


def select_critique_rows(rewards: np.ndarray, acc_range, rng: np.random.Generator, *, balance: str = "subsample",
                         priority: str = "low_acc", max_rows: int = 0) -> np.ndarray:
    """Flat sample indices (row r = query r // K) to critique, sorted.

    Candidates are the samples of queries whose accuracy lies in `acc_range`. balance="subsample" takes as many
    correct as wrong samples (none at all when a class is empty); "none" takes every candidate. `max_rows` (0 =
    no cap) caps the total, keeping the balance. priority="low_acc" fills each class from the lowest-accuracy
    queries first; "random" ignores accuracy.
    """
    if balance not in BALANCES:
        raise ValueError(f"cure critique_balance={balance!r} is unknown; use one of {BALANCES}")
    if priority not in PRIORITIES:
        raise ValueError(f"cure critique_priority={priority!r} is unknown; use one of {PRIORITIES}")
    rewards = np.asarray(rewards, np.float32)
    q, k = rewards.shape
    acc = query_accuracy(rewards)
    acc_of_row = np.repeat(acc, k)
    cand = np.repeat(in_range(acc, acc_range), k)
    correct = rewards.reshape(-1) > 0.5
    pos = _ordered(np.flatnonzero(cand & correct), acc_of_row, rng, priority)
    neg = _ordered(np.flatnonzero(cand & ~correct), acc_of_row, rng, priority)
    if balance == "subsample":
        n = min(len(pos), len(neg))
        if max_rows:
            n = min(n, max_rows // 2)
        idx = np.concatenate([pos[:n], neg[:n]])
    else:
        idx = np.concatenate([pos, neg])
        if max_rows and len(idx) > max_rows:
            # keep the class ratio as far as whole rows allow
            n_pos = int(round(max_rows * len(pos) / len(idx)))
            idx = np.concatenate([pos[:n_pos], neg[:max_rows - n_pos]])
    return np.sort(idx).astype(np.int64)


class ReplayAdvantages(NamedTuple):
    """base: [Q, K] advantages of the plain samples; replay: per query, one advantage per replayed sample;
    rewards / valid / advantages: the enlarged groups as the estimator saw them, [Q, K + padding]."""

    base: np.ndarray
    replay: list
    rewards: np.ndarray
    valid: np.ndarray
    advantages: np.ndarray


def replay_group_advantages(rewards: np.ndarray, replay_rewards: Sequence[Sequence[float]], estimator: str,
                            **estimator_kwargs) -> ReplayAdvantages:
    """Advantages of solve groups enlarged by replayed samples: query q's group is its K samples plus
    `replay_rewards[q]` (possibly none); the estimator sees the ragged groups through its `valid` mask."""
    rewards = np.asarray(rewards, np.float32)
    q, k = rewards.shape
    if len(replay_rewards) != q:
        raise ValueError(f"replay_rewards has {len(replay_rewards)} entries for {q} queries; give one list per query")
    extra = max((len(r) for r in replay_rewards), default=0)
    width = k + (1 << (extra - 1).bit_length() if extra else 0)  # power-of-two padding: few estimator shapes
    full = np.zeros((q, width), np.float32)
    valid = np.zeros((q, width), bool)
    full[:, :k], valid[:, :k] = rewards, True
    for i, r in enumerate(replay_rewards):
        full[i, k:k + len(r)] = np.asarray(r, np.float32)
        valid[i, k:k + len(r)] = True
    adv = np.asarray(adv_lib.compute_advantages(estimator, full, valid, **estimator_kwargs))
    return ReplayAdvantages(adv[:, :k], [adv[i, k:k + len(r)] for i, r in enumerate(replay_rewards)], full, valid,
                            adv)


def critique_rest_advantage(guided_correct: Optional[Sequence[float]], acc: float, *, scale: float,
                            format_penalty: float) -> float:
    """The advantage of a critique's generated tokens: scale * (mean guided correctness - acc(x)) + penalty for
    a critique of a wrong sample; the penalty alone for a critique of a correct one (`guided_correct` None)."""
    if guided_correct is None:
        return float(format_penalty)
    g = np.asarray(guided_correct, np.float64)
    if g.size == 0:
        raise ValueError("critique_rest_advantage: a critique of a wrong sample needs at least one guided solution")
    return float(scale * (g.mean() - acc) + format_penalty)


def segment_advantages(n_verdict: int, n_rest: int, verdict_advantage: float, rest_advantage: float) -> np.ndarray:
    """float32 [n_verdict + n_rest]: the forced verdict tokens, then the generated rest."""
    return np.concatenate([np.full((n_verdict,), verdict_advantage, np.float32),
                           np.full((n_rest,), rest_advantage, np.float32)])


def policy_logprobs(model, params, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], *,
                    pad_id: int = 0, rows_per_call: int = 16, chunk_size: Optional[int] = None,
                    temperature: float = 1.0) -> list:
    """log pi(completion token | prompt, earlier completion tokens) per row, float32 [len(completion)] each.

    One forward pass per `rows_per_call` rows (filler rows keep one compiled shape), logits never larger than a
    `chunk_size` slice of time. `params` (nnx.State) is the policy to score under; pass the trainer's current
    params -- the module's own weights may be stale. temperature: the sampling temperature, so the recomputed
    pi_old is the tempered policy's, as the sampler's own log-probs are (METHODS.md §1).
    """
    from jaxrl_reason.rl.scoring import reference_logprobs

    if len(prompts) != len(completions):
        raise ValueError(f"policy_logprobs got {len(prompts)} prompts and {len(completions)} completions")
    if not prompts:
        return []
    if rows_per_call < 1:
        raise ValueError(f"cure rescore_rows must be >= 1, got {rows_per_call}")
    graphdef, own = nnx.split(model)
    params = own if params is None else params
    out = []
    for s in range(0, len(prompts), rows_per_call):
        p, c = prompts[s:s + rows_per_call], completions[s:s + rows_per_call]
        batch = pad_rows_to(build_token_batch(p, c, [0.0] * len(p), None, "solve", pad_id=pad_id), rows_per_call)
        lp = np.asarray(reference_logprobs(graphdef, params, batch, chunk_size=chunk_size,
                                           temperature=float(temperature)))
        out.extend(lp[i, len(pi):len(pi) + len(ci)].astype(np.float32) for i, (pi, ci) in enumerate(zip(p, c)))
    return out


# ------------------------------------------------------------------------------------------------ the method


class _Critiques(NamedTuple):
    rows: np.ndarray  # flat solve-sample index of each critique
    prompts: list  # rendered critique prompt ids, without the verdict
    verdicts: list  # forced verdict ids
    generated: list  # generated ids after the verdict
    logprobs: list  # sampler log-probs of `generated`
    texts: list  # verdict + generated, decoded
    wrong: np.ndarray  # bool: the critiqued sample is wrong (verdict "true")


class CURE(GRPO):
    """Solve + critique + guided-solve rows with CURE's replay and hybrid critique advantages."""

    name = "cure"

    def __init__(self, estimator: str = "grpo", loss: PolicyLossConfig = PAPER_LOSS, *,
                 guided_samples: int = 4, critique_acc_range=(0.0, 0.9), replay_acc_range=(0.0, 0.0),
                 critique_advantage_scale: float = 2.0, verdict_advantage: float = 1.0,
                 critique_max_new_tokens: int = 384, guided_max_new_tokens: int = 0,
                 format_penalty_missing: float = -0.5, format_penalty_short_hint: float = -0.25,
                 min_hint_words: int = 10, critique_balance: str = "subsample", critique_priority: str = "low_acc",
                 max_critiques: int = 0, max_replay_per_query: int = 0, critique_weight: float = 1.0,
                 guided_weight: float = 1.0, rescore_rows: int = 16, rescore_chunk: int = 0, **estimator_kwargs):
        """Knobs (METHODS.md §3 names; defaults are the paper run's):

        guided_samples:            M, guided solutions per critique of a wrong sample
        critique_acc_range:        (lo, hi): queries whose samples may be critiqued
        replay_acc_range:          (lo, hi): queries whose successful guided solutions join the solve group
        critique_advantage_scale:  c in c * (mean guided correctness - acc(x))
        verdict_advantage:         the fixed advantage of the teacher-forced verdict tokens
        critique_max_new_tokens:   generation budget of a critique after its verdict
        guided_max_new_tokens:     budget of a guided solution (0 = the trainer's max_new_tokens)
        format_penalty_missing / format_penalty_short_hint / min_hint_words: the critique format penalty
        critique_balance:          subsample (1:1 correct/wrong) | none
        critique_priority:         low_acc (zero-pass, then partial queries first) | random
        max_critiques:             cap on critiques per step (0 = none)
        max_replay_per_query:      cap on replayed samples per query (0 = none)
        critique_weight / guided_weight: coefficients of the critique and guided_solve terms (solve: 1)
        rescore_rows / rescore_chunk: rows per forward and time chunk (0 = none) when recomputing pi_old
        """
        super().__init__(estimator, loss, **estimator_kwargs)
        if int(guided_samples) < 1:
            raise ValueError(f"cure guided_samples (M) must be >= 1, got {guided_samples}")
        if int(critique_max_new_tokens) < 1:
            raise ValueError(f"cure critique_max_new_tokens must be >= 1, got {critique_max_new_tokens}")
        if int(guided_max_new_tokens) < 0 or int(max_critiques) < 0 or int(max_replay_per_query) < 0:
            raise ValueError("cure guided_max_new_tokens, max_critiques and max_replay_per_query must be >= 0 "
                             "(0 = default / no cap)")
        if format_penalty_missing > 0 or format_penalty_short_hint > 0:
            raise ValueError("cure format_penalty_missing and format_penalty_short_hint are penalties: give values "
                             f"<= 0, got {format_penalty_missing}, {format_penalty_short_hint}")
        if critique_weight < 0 or guided_weight < 0:
            raise ValueError(f"cure critique_weight and guided_weight must be >= 0, got {critique_weight}, "
                             f"{guided_weight}")
        if critique_balance not in BALANCES:
            raise ValueError(f"cure critique_balance={critique_balance!r} is unknown; use one of {BALANCES}")
        if critique_priority not in PRIORITIES:
            raise ValueError(f"cure critique_priority={critique_priority!r} is unknown; use one of {PRIORITIES}")
        self.guided_samples = int(guided_samples)
        self.critique_acc_range = _check_range("critique_acc_range", critique_acc_range)
        self.replay_acc_range = _check_range("replay_acc_range", replay_acc_range)
        self.critique_advantage_scale = float(critique_advantage_scale)
        self.verdict_advantage = float(verdict_advantage)
        self.critique_max_new_tokens = int(critique_max_new_tokens)
        self.guided_max_new_tokens = int(guided_max_new_tokens)
        self.format_penalty_missing = float(format_penalty_missing)
        self.format_penalty_short_hint = float(format_penalty_short_hint)
        self.min_hint_words = int(min_hint_words)
        self.critique_balance, self.critique_priority = critique_balance, critique_priority
        self.max_critiques, self.max_replay_per_query = int(max_critiques), int(max_replay_per_query)
        self.critique_weight, self.guided_weight = float(critique_weight), float(guided_weight)
        self.rescore_rows, self.rescore_chunk = int(rescore_rows), int(rescore_chunk) or None

    def terms(self) -> tuple[TermSpec, ...]:
        l = self.loss
        kw = dict(aggregation=l.aggregation, max_len=l.max_len, eps_low=l.eps_low, eps_high=l.eps_high,
                  dual_clip=l.dual_clip)
        t = [pg_spec(("solve",), name="pg", **kw),
             pg_spec(("critique",), name="critique", weight=self.critique_weight, **kw),
             pg_spec(("guided_solve",), name="guided_solve", weight=self.guided_weight, **kw)]
        if l.beta:
            t.append(kl_spec(CURE_TASKS, beta=l.beta, estimator=l.kl_estimator))
        return tuple(t)

    # -------------------------------------------------------------------------------------- generation steps

    def _critique(self, ro: Rollouts, rows: np.ndarray, ctx: Context) -> _Critiques:
        tok, g = ctx.tokenizer, ro.group_size
        wrong = ro.rewards.reshape(-1)[rows] <= 0.5
        texts = [tok.render_prompt(critique_prompt(ro.examples[r // g].question, ro.texts[r])) for r in rows]
        prompts = tok.encode_ragged(texts)
        # Encoded on their own (not merged with the prompt's last token), so the verdict is the same ids in
        # every row and the same ids the model must produce by itself at test time.
        verdict_ids = {w: tok.encode(critique_verdict_prefix(bool(w))) for w in (True, False)}
        verdicts = [verdict_ids[bool(w)] for w in wrong]
        out = ctx.sample([p + v for p, v in zip(prompts, verdicts)], num_samples=1,
                         max_new_tokens=self.critique_max_new_tokens)
        generated = out.completions()
        logprobs = [np.asarray(out.logprobs[i, :n], np.float32) for i, n in enumerate(out.lengths)]
        rest = tok.batch_decode(out.tokens, lengths=out.lengths, skip_special_tokens=True)
        full = [critique_verdict_prefix(bool(w)) + r for w, r in zip(wrong, rest)]
        return _Critiques(rows, prompts, verdicts, generated, logprobs, full, wrong)

    def _guided(self, ro: Rollouts, examples: list, hints: list, ctx: Context):
        m = self.guided_samples
        tok = ctx.tokenizer
        prompts = tok.encode_ragged([tok.render_prompt(guided_prompt(e.question, h)) for e, h in zip(examples, hints)])
        kw = {"max_new_tokens": self.guided_max_new_tokens} if self.guided_max_new_tokens else {}
        out = ctx.sample(prompts, num_samples=m, **kw)
        texts = tok.batch_decode(out.tokens, lengths=out.lengths, skip_special_tokens=True)
        per_row = [examples[i // m] for i in range(len(texts))]
        scores = np.asarray(ctx.reward(texts, per_row).scores, np.float32).reshape(len(examples), m)
        logprobs = [np.asarray(out.logprobs[i, :n], np.float32) for i, n in enumerate(out.lengths)]
        return prompts, out.completions(), logprobs, scores

    # -------------------------------------------------------------------------------------- build

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        ro = rollouts
        q, k = ro.rewards.shape
        if len(ro.completions) != q * k:
            raise ValueError(f"rollouts hold {len(ro.completions)} completions for rewards of shape {(q, k)}")
        if ctx.model is None or ctx.params is None:
            raise ValueError("CURE recomputes pi_old of replayed and teacher-forced tokens: the Context needs "
                             "`model` and the current `params`")
        acc = query_accuracy(ro.rewards)
        metrics: dict[str, Any] = {"cure/zero_pass_frac": float(np.mean(acc == 0.0))}

        rows = select_critique_rows(ro.rewards, self.critique_acc_range, ctx.rng, balance=self.critique_balance,
                                    priority=self.critique_priority, max_rows=self.max_critiques)
        crit = self._critique(ro, rows, ctx) if len(rows) else None
        parsed = [parse_critique(t, min_hint_words=self.min_hint_words) for t in crit.texts] if crit else []
        penalties = [critique_format_penalty(c, missing=self.format_penalty_missing,
                                             short_hint=self.format_penalty_short_hint) for c in parsed]

        # Guided re-exploration from the hints of critiques of wrong samples.
        w_idx = [j for j in range(len(rows)) if crit.wrong[j]] if crit else []
        guided = None
        if w_idx:
            ex = [ro.examples[rows[j] // k] for j in w_idx]
            guided = self._guided(ro, ex, [parsed[j].hint or "" for j in w_idx], ctx)
        g_prompts, g_comps, g_lps, g_scores = guided if guided else ([], [], [], np.zeros((0, self.guided_samples)))
        g_correct = g_scores > 0.5

        # Replay: successful guided solutions of queries in the replay range join the plain solve group.
        replay_ok = in_range(acc, self.replay_acc_range)
        replay: list[list[tuple[int, int]]] = [[] for _ in range(q)]  # (guided group, sample) per query
        for gi, j in enumerate(w_idx):
            qi = int(rows[j] // k)
            if replay_ok[qi]:
                replay[qi].extend((gi, s) for s in np.flatnonzero(g_correct[gi]))
        if self.max_replay_per_query:
            replay = [r[:self.max_replay_per_query] for r in replay]
        flat_replay = [(qi, gi, s) for qi, r in enumerate(replay) for gi, s in r]

        # pi_old of the forced verdict tokens and of the replayed samples under the plain prompt, in one pass.
        score_p = list(crit.prompts) if crit else []
        score_c = list(crit.verdicts) if crit else []
        score_p += [ro.prompts[qi] for qi, _, _ in flat_replay]
        score_c += [g_comps[gi * self.guided_samples + s] for _, gi, s in flat_replay]
        lps = policy_logprobs(ctx.model, ctx.params, score_p, score_c, pad_id=ctx.pad_id,
                              rows_per_call=self.rescore_rows, chunk_size=self.rescore_chunk,
                              temperature=ctx.temperature)
        verdict_lps, replay_lps = lps[:len(rows)], lps[len(rows):]

        # --- solve task (enlarged groups)
        replay_rewards = [[float(g_scores[gi, s]) for gi, s in r] for r in replay]
        adv = replay_group_advantages(ro.rewards, replay_rewards, self.estimator, **self.estimator_kwargs)
        prompts = [ro.prompts[r // k] for r in range(q * k)] + [ro.prompts[qi] for qi, _, _ in flat_replay]
        comps = list(ro.completions) + [g_comps[gi * self.guided_samples + s] for _, gi, s in flat_replay]
        advs = list(adv.base.reshape(-1)) + [float(a) for r in adv.replay for a in r]
        olds = list(ro.logprobs) + replay_lps
        batches = [build_token_batch(prompts, comps, advs, olds, "solve", pad_id=ctx.pad_id)]
        metrics.update({f"solve/{n}": float(v) for n, v in
                        adv_lib.group_metrics(adv.rewards, adv.valid, advantages=adv.advantages).items()})
        metrics["replay/rows"] = len(flat_replay)
        metrics["replay/queries"] = int(sum(1 for r in replay if r))

        # --- critique task (hybrid advantage by segment)
        metrics["critique/rows"] = len(rows)
        if crit:
            g_of = {j: gi for gi, j in enumerate(w_idx)}
            c_adv, rest_adv = [], []
            for j, r in enumerate(rows):
                guided_c = g_correct[g_of[j]] if j in g_of else None
                a = critique_rest_advantage(guided_c, float(acc[r // k]), scale=self.critique_advantage_scale,
                                            format_penalty=penalties[j])
                rest_adv.append(a)
                c_adv.append(segment_advantages(len(crit.verdicts[j]), len(crit.generated[j]),
                                                self.verdict_advantage, a))
            c_comps = [v + gen for v, gen in zip(crit.verdicts, crit.generated)]
            c_olds = [np.concatenate([vl, gl]) for vl, gl in zip(verdict_lps, crit.logprobs)]
            batches.append(build_token_batch(crit.prompts, c_comps, c_adv, c_olds, "critique", pad_id=ctx.pad_id))
            ok = np.array([not c.format_errors for c in parsed])
            metrics.update({
                "critique/wrong_frac": float(crit.wrong.mean()),
                "critique/format_ok_frac": float(ok.mean()),
                "critique/format_penalty_mean": float(np.mean(penalties)),
                "critique/hint_words_mean": float(np.mean([c.hint_words for c in parsed])),
                "critique/rest_advantage_mean": float(np.mean(rest_adv)),
                "critique/length_mean": float(np.mean([len(x) for x in crit.generated])),
            })

        # --- guided_solve task (GRPO per (x, hint) group)
        metrics["guided_solve/rows"] = len(g_comps)
        if g_comps:
            m = self.guided_samples
            g_adv = group_advantages(g_scores, self.estimator, **self.estimator_kwargs)
            batches.append(build_token_batch([g_prompts[i // m] for i in range(len(g_comps))], g_comps,
                                             list(g_adv.reshape(-1)), g_lps, "guided_solve", pad_id=ctx.pad_id))
            metrics.update({f"guided_solve/{n}": float(v) for n, v in
                            adv_lib.group_metrics(g_scores, advantages=g_adv).items()})
            metrics["guided_solve/accuracy"] = float(g_correct.mean())
            zp = [gi for gi, j in enumerate(w_idx) if acc[rows[j] // k] == 0.0]
            if zp:
                metrics["guided_solve/zero_pass_accuracy"] = float(g_correct[zp].mean())
        return concat_batches(batches), metrics

    def state_dict(self) -> dict:
        return {}  # no host state: every step is a function of its own rollouts

    def load_state_dict(self, d: dict) -> None:
        pass
