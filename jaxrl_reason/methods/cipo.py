"""CIPO (docs/methods/cipo.md#spec): correction-oriented policy optimisation from the policy's own attempts.

Per step, two streams in the one fused update:
  solve    the base GRPO stream: the step's G rollouts per query (rows of task `solve`, term "pg");
  correct  replay prompts `replay_correction_prompt(x, y)` built from this step's own rollouts y -- the query, the
           attempt verbatim, the review-and-correct instruction and the task's answer format -- with G'
           (`correction_samples`) rollouts each, rewarded by the same verifier, one group per replay prompt
           (rows of task `correct`, their own PPO-clip term "correct").

Which attempts are replayed:
  - a share rho_t of the replay prompts is built from *successful* attempts, the rest from failed ones;
  - rho_t adapts to retention, the accuracy of corrections of successful sources (`RatioState`, `update_ratio`):
    up by `rho_step` when the windowed retention is below `tau_low` or fell by more than `delta` against the
    previous window's, down by `rho_step` when it is above `tau_high` or rose by more than `delta` (the default
    `drop_test="window"`; `"step"`, the spec's rule as written, compares one step's retention with the window's mean
    and ratchets rho up under noise), clipped to [rho_min, rho_max]. Its state is the method's state_dict, saved
    with every checkpoint;
  - failed sources are taken in the difficulty-aware order of `rank_failed_sources`: mixed queries
    (0 < acc(x) < 1) before zero-pass ones, by weight acc(1 - acc) + floor within each tier.

Risk-averse shaping. The seed writes the regression penalty as `alpha * r` with r = 0 for a wrong answer, which
taken literally is a no-op. We read it as widening the gap between keeping and breaking a right answer: a
correction of a successful source that comes out wrong gets reward -(alpha - 1) (alpha > 1, default 2) instead
of 0, before group normalisation; every other correction keeps its 0/1 reward (`shape_correction_rewards`).

The seed stops before its difficulty-preference, template and ratio-update sections: all three are our choices,
each with a knob (docs/methods/cipo.md).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np

from jaxrl_reason.data.prompts import SOLVE_INSTRUCTION, replay_correction_prompt
from jaxrl_reason.data.testbed import correction_target, injected_wrong, task_of
from jaxrl_reason.methods.base import Context, Rollouts, generate_rollouts, join_rows
from jaxrl_reason.methods.grpo import GRPO, PolicyLossConfig, group_advantages, solve_rows
from jaxrl_reason.methods.rlv import RLV
from jaxrl_reason.rl import advantages as adv_lib
from jaxrl_reason.rl.batch import TokenBatch
from jaxrl_reason.rl.losses import TermSpec

PREFERENCES = ("difficulty", "uniform")


# ------------------------------------------------------------------------------------------------ pure pieces


def shape_correction_rewards(rewards: np.ndarray, source_correct: np.ndarray, alpha: float) -> np.ndarray:
    """[N, G'] correction rewards -> [N, G'] shaped rewards: a wrong correction (reward <= 0.5) of a successful
    source (`source_correct[n]`) gets -(alpha - 1); every other entry is returned unchanged."""
    rewards = np.asarray(rewards, np.float32)
    source_correct = np.asarray(source_correct, bool)
    if rewards.ndim != 2 or source_correct.shape != rewards.shape[:1]:
        raise ValueError(f"shape_correction_rewards: rewards must be [N, G'] and source_correct [N], got "
                         f"{rewards.shape} and {source_correct.shape}")
    if not alpha > 1.0:
        raise ValueError(f"cipo alpha must be > 1 (a regression gets -(alpha - 1)), got {alpha}")
    regression = source_correct[:, None] & (rewards <= 0.5)
    return np.where(regression, np.float32(-(alpha - 1.0)), rewards).astype(np.float32)


def rank_failed_sources(rewards: np.ndarray, rng: np.random.Generator, *, preference: str = "difficulty",
                        floor: float = 0.05) -> np.ndarray:
    """Flat indices (row r = query r // G) of the failed samples of [Q, G] rewards, in the order they become
    replay sources.

    difficulty: samples of mixed queries (0 < acc < 1: a correction is reachable) first, then zero-pass ones;
      within each tier by weight acc(1 - acc) + floor, highest first, ties in random order;
    uniform: a random order."""
    rewards = np.asarray(rewards, np.float32)
    q, g = rewards.shape
    wrong = np.flatnonzero(rewards.reshape(-1) <= 0.5)
    order = rng.permutation(len(wrong))  # the tie-break
    wrong = wrong[order]
    if preference == "uniform":
        return wrong.astype(np.int64)
    if preference != "difficulty":
        raise ValueError(f"cipo preference={preference!r} is unknown; use one of {PREFERENCES}")
    acc = (rewards > 0.5).mean(axis=1)[wrong // g]
    weight = acc * (1.0 - acc) + floor
    tier = (acc == 0.0).astype(np.int64)  # 0: mixed, 1: zero-pass
    return wrong[np.lexsort((-weight, tier))].astype(np.int64)  # stable: equal keys keep the random order


def select_sources(rewards: np.ndarray, n: int, rho: float, rng: np.random.Generator, *,
                   preference: str = "difficulty", floor: float = 0.05) -> np.ndarray:
    """Flat indices of the `n` replay sources of a step: round(rho * n) successful samples (a random subset) and
    the rest failed ones (`rank_failed_sources` order), each sample at most once. A class that runs short hands
    its slots to the other; fewer than `n` only when the step has fewer than `n` samples."""
    rewards = np.asarray(rewards, np.float32)
    right = rng.permutation(np.flatnonzero(rewards.reshape(-1) > 0.5))
    wrong = rank_failed_sources(rewards, rng, preference=preference, floor=floor)
    n_right = min(int(round(rho * n)), len(right))
    n_wrong = min(n - n_right, len(wrong))
    n_right = min(n - n_wrong, len(right))
    return np.concatenate([right[:n_right], wrong[:n_wrong]]).astype(np.int64)


class RatioState(NamedTuple):
    """The adaptive replay ratio and its moving window: per step, the number of corrections of successful sources
    (`counts`) and how many of them came out right (`hits`), newest last, at most `window` steps."""

    rho: float
    hits: tuple = ()
    counts: tuple = ()


def windowed_retention(hits: Sequence[float], counts: Sequence[float]) -> float:
    """Accuracy of corrections of successful sources pooled over the window (nan when it holds none)."""
    c = float(np.sum(counts)) if len(counts) else 0.0
    return float(np.sum(hits)) / c if c else float("nan")


DROP_TESTS = ("step", "window")


def update_ratio(state: RatioState, hits: int, count: int, *, rho_min: float, rho_max: float, rho_step: float,
                 tau_low: float, tau_high: float, delta: float, window: int, drop_test: str = "step") -> RatioState:
    """One step of the ratio rule. With this step's `count` corrections of successful sources, `hits` right:
    retention R is pooled over the last `window` steps including this one; rho += rho_step if R < tau_low or
    retention dropped by more than `delta`; rho -= rho_step if R > tau_high; clipped to [rho_min, rho_max]. A step
    with no successful source leaves rho and the window as they are.

    drop_test: what "dropped" compares. "step" (docs/methods/cipo.md#spec-adaptive-replay-ratio as written): this step's
    retention against the mean of the window's earlier steps' -- a step measures ~16 corrections, so under noise alone
    it falls `delta` below the mean every few steps and, with `tau_high` out of reach, rho only climbs
    (docs/results/cipo_testbed.md). "window": R against the pooled retention of the `window` steps before the window,
    once there are that many (the state then keeps 2 x `window` steps), both ways: a drop of more than `delta` moves rho
    up, a rise of more than `delta` moves it down, so noise moves rho both ways instead of ratcheting it up. (`delta` >=
    1 turns the drop test off in either mode: rho then follows the tau_low / tau_high band alone.)"""
    if drop_test not in DROP_TESTS:
        raise ValueError(f"cipo drop_test={drop_test!r} is unknown; use {' | '.join(DROP_TESTS)}")
    if count <= 0:
        return state
    keep = window if drop_test == "step" else 2 * window
    hits_k = (tuple(state.hits) + (int(hits),))[-keep:]
    counts_k = (tuple(state.counts) + (int(count),))[-keep:]
    retention = windowed_retention(hits_k[-window:], counts_k[-window:])
    if drop_test == "step":
        earlier = [h / c for h, c in zip(state.hits[-window:], state.counts[-window:]) if c]
        dropped = bool(earlier) and hits / count < float(np.mean(earlier)) - delta
    else:
        full = len(counts_k) == 2 * window  # no test until a whole earlier window has been measured
        change = retention - windowed_retention(hits_k[:window], counts_k[:window]) if full else 0.0
        dropped, rose = change < -delta, change > delta
    rho = state.rho
    if retention < tau_low or dropped:
        rho += rho_step
    elif retention > tau_high or (drop_test == "window" and rose):
        rho -= rho_step
    return RatioState(float(np.clip(rho, rho_min, rho_max)), hits_k, counts_k)


# ------------------------------------------------------------------------------------------------ the method


class CIPO(GRPO):
    """Solve rows plus correction rows from the step's own attempts, with an adaptive replay ratio and risk-averse
    shaping. Cooperative: `super()` calls reach the next class of the MRO, so `CIPOV` (RL^V + CIPO) is a union."""

    name = "cipo"
    tasks = ("solve", "correct")
    part = "correct"
    # Tool rows: the solve rows are GRPO's (environment tokens masked); a correction is a single-turn sample
    # without tools whose prompt holds the attempt's transcript (docs/methods/multi_turn.md#training-and-warm-up).
    trains_tool_rows = True

    def __init__(self, estimator: str = "grpo", loss: Optional[PolicyLossConfig] = None, *,
                 correction_samples: int = 4, replay_prompts: int = 0, rho_init: float = 0.5, rho_min: float = 0.1,
                 rho_max: float = 0.9, rho_step: float = 0.05, tau_low: float = 0.6, tau_high: float = 0.9,
                 delta: float = 0.1, window: int = 8, drop_test: str = "window", alpha: float = 2.0,
                 preference: str = "difficulty",
                 difficulty_floor: float = 0.05, answer_instruction: str = SOLVE_INSTRUCTION,
                 correct_weight: float = 1.0, correction_max_new_tokens: int = 0,
                 correction_estimator: str = "grpo_batch_std", correction_prompts_per_call: int = 0, **kwargs):
        """Knobs (docs/methods/cipo.md#spec names; docs/methods/cipo.md says which are ours):

        correction_samples:   G', rollouts per replay prompt (one group each)
        replay_prompts:       replay prompts per step (0 = Q, one per query of the step)
        rho_init / rho_min / rho_max / rho_step: the replay ratio's start, bounds and step
        tau_low / tau_high / delta / window: the ratio rule (`update_ratio`); window in steps
        drop_test:            window | step: what a retention drop of `delta` compares (`update_ratio`). Not
                              `step`, the rule as docs/methods/cipo.md#spec-adaptive-replay-ratio writes it: one
                              step's ~16 corrections fall `delta` below the window mean on noise alone every few
                              steps and nothing as frequent moves rho down, so rho ratchets to rho_max (0.5 -> 0.9
                              in 38 steps, docs/results/cipo_testbed.md); `window` tests both ways on pooled
                              windows: no drift under noise
        alpha:                a regression's reward is -(alpha - 1) (alpha > 1)
        preference:           difficulty | uniform: the order failed sources are taken in
        difficulty_floor:     the floor of the weight acc(1 - acc) + floor
        answer_instruction:   the task's answer-format sentence ending the replay prompt (math: \\boxed{})
        correct_weight:       coefficient of the correct term and of its KL (solve: 1)
        correction_max_new_tokens: budget of a correction (0 = the trainer's max_new_tokens)
        correction_estimator: the correct stream's advantage estimator ("" = the method's, with its keywords).
                              Not `grpo`: every rollout of a group shares its source, so the shaping maps a
                              right-source group's {0, 1} rewards to {-(alpha - 1), 1}, an affine map that a
                              per-group std leaves without effect; `grpo_batch_std` (group mean, batch std) keeps
                              it: such groups' advantages grow alpha-fold against the others'
        correction_prompts_per_call: replay prompts sampled together (0 = all in one sampler call); a cap keeps
                              the correction sampler's KV cache (prompts that hold a whole attempt) to that many
                              prompts x G' rows, the same samples (`sampling.sampler.sample`'s prompts_per_call)
        """
        super().__init__(estimator, loss, **kwargs)
        if self.loss.overlong_buffer or self.loss.overlong_filter:
            raise ValueError("cipo does not apply DAPO's overlong shaping or filter to correction rows; set "
                             "method.overlong_buffer=0 and method.overlong_filter=False")
        if int(correction_samples) < 2:
            raise ValueError(f"cipo correction_samples (G') must be >= 2 (a group of one has no advantage), "
                             f"got {correction_samples}")
        if int(replay_prompts) < 0 or int(correction_max_new_tokens) < 0 or int(correction_prompts_per_call) < 0:
            raise ValueError("cipo replay_prompts, correction_max_new_tokens and correction_prompts_per_call must be "
                             f">= 0 (0 = the default), got {replay_prompts}, {correction_max_new_tokens}, "
                             f"{correction_prompts_per_call}")
        self.correction_prompts_per_call = int(correction_prompts_per_call)
        if not 0.0 <= rho_min <= rho_init <= rho_max <= 1.0:
            raise ValueError(f"cipo needs 0 <= rho_min <= rho_init <= rho_max <= 1, got rho_min={rho_min}, "
                             f"rho_init={rho_init}, rho_max={rho_max}")
        if not 0.0 <= tau_low <= tau_high <= 1.0 or rho_step < 0 or delta < 0 or int(window) < 1:
            raise ValueError(f"cipo needs 0 <= tau_low <= tau_high <= 1, rho_step >= 0, delta >= 0 and window >= 1; "
                             f"got tau_low={tau_low}, tau_high={tau_high}, rho_step={rho_step}, delta={delta}, "
                             f"window={window}")
        if drop_test not in DROP_TESTS:
            raise ValueError(f"cipo drop_test={drop_test!r} is unknown; use {' | '.join(DROP_TESTS)}")
        if not alpha > 1.0:
            raise ValueError(f"cipo alpha must be > 1 (a regression gets -(alpha - 1)), got {alpha}")
        if preference not in PREFERENCES:
            raise ValueError(f"cipo preference={preference!r} is unknown; use one of {PREFERENCES}")
        if difficulty_floor < 0 or correct_weight < 0:
            raise ValueError(f"cipo difficulty_floor and correct_weight must be >= 0, got {difficulty_floor}, "
                             f"{correct_weight}")
        self.correction_samples, self.replay_prompts = int(correction_samples), int(replay_prompts)
        self.ratio_knobs = dict(rho_min=float(rho_min), rho_max=float(rho_max), rho_step=float(rho_step),
                                tau_low=float(tau_low), tau_high=float(tau_high), delta=float(delta),
                                window=int(window), drop_test=drop_test)
        self.ratio = RatioState(float(rho_init))
        self.alpha, self.preference, self.difficulty_floor = float(alpha), preference, float(difficulty_floor)
        self.answer_instruction = answer_instruction
        self.correct_weight = float(correct_weight)
        self.correction_max_new_tokens = int(correction_max_new_tokens)
        if correction_estimator and correction_estimator not in adv_lib.ESTIMATORS:
            raise ValueError(f"cipo correction_estimator={correction_estimator!r} is unknown; use '' (the method's) "
                             f"or one of {sorted(adv_lib.ESTIMATORS)}")
        self.correction_estimator = correction_estimator

    def check(self, config, task, tokenizer) -> None:
        """Fails before any training when corrections open with the worked check (data.correction_format
        "worked_check") and a correction gets fewer new tokens than a check and a worked solution take under this
        tokenizer: every correction would be cut before its answer and score 0."""
        super().check(config, task, tokenizer)
        data = config.data
        if data.correction_format == "solution":
            return
        budget = self.correction_max_new_tokens or config.rl.max_new_tokens
        tb, rng = task_of(data.source), np.random.default_rng(config.seed)
        need = max((len(tokenizer.encode(correction_target(tb, e.question, injected_wrong(tb, e, rng)[0], e.solution,
                                                           data.correction_format))) for e in task.train[:32]),
                   default=0)
        if need > budget:
            raise ValueError(f"config method.extra.correction_max_new_tokens={budget} (0 = rl.max_new_tokens) is "
                             f"shorter than a {data.source} correction that opens with the worked check under this "
                             f"tokenizer (up to {need} tokens): such corrections would be cut before their answer; "
                             f"set it to at least {need}")

    def terms(self) -> tuple[TermSpec, ...]:
        if not self.correct_weight:  # the part is off: no correction rows, no term
            return super().terms()
        return super().terms() + self.loss.terms(("correct",), name="correct", kl_name="correct_kl",
                                                 weight=self.correct_weight)

    def correction_advantages(self, shaped: np.ndarray) -> np.ndarray:
        """[N, G'] shaped correction rewards -> [N, G'] advantages with the correction stream's estimator."""
        if not self.correction_estimator:
            return group_advantages(shaped, self.estimator, **self.estimator_kwargs)
        return group_advantages(shaped, self.correction_estimator)

    def replay_prompt_texts(self, rollouts: Rollouts, sources: np.ndarray,
                            correction_format: str = "solution") -> list:
        g = rollouts.group_size
        return [replay_correction_prompt(rollouts.examples[r // g].question, rollouts.texts[r],
                                         self.answer_instruction, correction_format) for r in sources]

    def build(self, rollouts: Rollouts, ctx: Context) -> tuple[TokenBatch, dict]:
        base, metrics = super().build(rollouts, ctx)
        if not self.correct_weight:  # the part is off: nothing sampled, rho and its window left as they are
            return base, metrics
        ctx = self.part_context(ctx, "correct")
        ro, tok = rollouts, ctx.tokenizer
        q, g = ro.rewards.shape
        rho = self.ratio.rho
        sources = select_sources(ro.rewards, self.replay_prompts or q, rho, ctx.rng, preference=self.preference,
                                 floor=self.difficulty_floor)
        metrics["cipo/rho"] = rho
        if not len(sources):
            return base, metrics
        source_ok = ro.rewards.reshape(-1)[sources] > 0.5
        texts = self.replay_prompt_texts(ro, sources, ctx.formats.correction_format)
        prompts = tok.encode_ragged([tok.render_prompt(t) for t in texts])
        kw = {"max_new_tokens": self.correction_max_new_tokens} if self.correction_max_new_tokens else {}
        if self.correction_prompts_per_call:
            kw["prompts_per_call"] = self.correction_prompts_per_call
        corr = generate_rollouts(ctx.sample, tok, prompts, [ro.examples[r // g] for r in sources],
                                 num_samples=self.correction_samples, reward=ctx.reward, **kw)
        shaped = shape_correction_rewards(corr.rewards, source_ok, self.alpha)
        adv = self.correction_advantages(shaped)
        rows, row_metrics = solve_rows(corr, adv, self.loss, pad_id=ctx.pad_id, task="correct")
        right = corr.rewards > 0.5
        metrics.update({f"correct/{k}": float(v) for k, v in adv_lib.group_metrics(shaped, advantages=adv).items()})
        metrics.update({f"correct/{k}": v for k, v in row_metrics.items()})
        metrics.update(self._stream_metrics(right, source_ok))
        # Tokens the correction stream generated beyond the solve rollouts: what CIPO spends over GRPO per step. A
        # union's parts each log their own and add to the step's total.
        metrics["cipo/extra_tokens"] = float(sum(len(c) for c in corr.completions))
        metrics["generate/extra_tokens"] = metrics.get("generate/extra_tokens", 0.0) + metrics["cipo/extra_tokens"]
        hits, count = int(right[source_ok].sum()), int(right[source_ok].size)
        self.ratio = update_ratio(self.ratio, hits, count, **self.ratio_knobs)
        metrics["cipo/rho_next"] = self.ratio.rho
        w = self.ratio_knobs["window"]
        metrics["cipo/retention_window"] = windowed_retention(self.ratio.hits[-w:], self.ratio.counts[-w:])
        return join_rows([base, rows]), metrics

    @staticmethod
    def _stream_metrics(right: np.ndarray, source_ok: np.ndarray) -> dict:
        """right: bool [N, G'] corrections judged right; source_ok: bool [N] the source attempt was right."""
        m = {"correct/rows": int(right.size), "correct/accuracy": float(right.mean()),
             "correct/success_source_frac": float(source_ok.mean())}
        if source_ok.any():
            m["correct/retention"] = float(right[source_ok].mean())
            m["correct/break_rate"] = 1.0 - m["correct/retention"]
        if (~source_ok).any():
            m["correct/fix_rate"] = float(right[~source_ok].mean())
        return m

    def state_dict(self) -> dict:
        """The replay ratio and its window (JSON: floats round-trip exactly)."""
        s = self.ratio
        return {**super().state_dict(), "rho": s.rho, "hits": list(s.hits), "counts": list(s.counts)}

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict(d)  # a union's other parts read their own keys
        if not d:
            return  # a checkpoint from before CIPO kept state: start from rho_init
        missing = sorted({"rho", "hits", "counts"} - set(d))
        if missing:
            raise ValueError(f"cipo state is missing {missing}; expected the keys of CIPO.state_dict()")
        self.ratio = RatioState(float(d["rho"]), tuple(int(x) for x in d["hits"]),
                                tuple(int(x) for x in d["counts"]))


class CIPOV(CIPO, RLV):
    """The union GRPO^V + CIPO: solve, verify and correct rows in one update (MRO: CIPO -> RLV -> GRPO), each term
    logged under its own name (pg, verify, correct)."""

    name = "cipo_v"
    tasks = ("solve", "verify", "correct")
    # No constructor of its own: CIPO's forwards what it does not take to RLV's (methods.method_knobs lists both).

