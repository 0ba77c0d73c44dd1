"""Loss terms (PPO clip, KL to a reference, SFT) and the objective that sums them; log-probs come from
`rl.scoring`.

All tensors follow the TokenBatch shift convention (see `rl/batch.py`): position t of `logprobs`, `loss_mask`,
`advantages`, `old_logprobs` and `ref_logprobs` refers to the target token `tokens[:, t]`.

Exact gradient accumulation
---------------------------
A term's loss is `num / den`. `num` is a sum over the term's tokens of per-token losses times aggregation
weights, so it splits over any partition of rows; `den` is a count (tokens or sequences) over the *whole* batch.
The trainer computes `counts = batch_counts(full_batch)` once (masks only, no forward pass) and passes it to the
objective of every micro-batch:

    loss_i, metrics_i = objective(logprobs_i, micro_batch_i, terms, counts=counts)
    sum_i grad(loss_i) == grad(objective(logprobs, full_batch, terms)[0])     (exactly, up to float rounding)
    sum_i metrics_i    == full-batch metrics                                    (every metric is num / global den)

So both gradients and metrics are summed, never averaged, across micro-batches (inside one jit: stack the
micro-batches with `batch.stack_micro_batches` and `lax.scan` over them, as tests/test_losses.py does). Rows never straddle
micro-batches, which keeps per-sequence lengths (used by the sequence-mean aggregations) local to a row.
Without `counts` the objective normalises by the batch it is given, i.e. a single-micro-batch step.

A GRPO^V step, for instance, is

    agg = "seq_mean_token_mean"
    terms = (pg_spec(("solve",), aggregation=agg),
             sft_spec(("verify",), weight=lam),
             kl_spec(("solve",), beta=beta, aggregation=agg))   # the KL in the policy term's aggregation;
                                                                 # beta = 0: no reference forward
    loss, metrics = objective(scoring.next_token_logprobs(logits, batch.tokens), batch, terms, counts=counts)
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_reason.rl.batch import TASKS, TokenBatch, register_task, task_id, task_name

# ----------------------------------------------------------------------------------------------------------------
# Aggregation: per-token weights (micro-batch local) and denominators (global counts)

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


class LossTerm(NamedTuple):
    """A loss as numerator and denominator; the loss is num / den. Both float32 scalars."""

    num: jax.Array
    den: jax.Array

    @property
    def value(self) -> jax.Array:
        return safe_divide(self.num, self.den)


class Counts(NamedTuple):
    """Normalisers counted on the full batch, one entry per task id (index = TASKS id).

    tokens:    float32 [num_tasks] trained target tokens (sum of loss_mask: weighted where loss_mask holds weights)
    sequences: float32 [num_tasks] sequences (segments) with at least one trained token in that task's rows
    """

    tokens: jax.Array
    sequences: jax.Array


def safe_divide(num, den):
    # 0 / 0 (a task absent from the batch) is 0. Counts are sums of loss_mask: integers, or weights when a row
    # weighs its tokens (`train.trainer.sft_rows` span weights), so a count may lie in (0, 1).
    return num / jnp.where(den > 0, den, 1.0)


def segment_lengths(mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """[B, T]: for each token, the number of masked tokens in its (row, segment). O(B*T) memory."""
    B, T = mask.shape
    seg = jnp.clip(segment_ids.astype(jnp.int32), 0, T)
    flat = (jnp.arange(B, dtype=jnp.int32)[:, None] * (T + 1) + seg).reshape(-1)
    sums = jax.ops.segment_sum(mask.reshape(-1).astype(jnp.float32), flat, num_segments=B * (T + 1))
    return sums[flat].reshape(B, T)


def aggregation_weights(
    mask: jax.Array, segment_ids: jax.Array, aggregation: str, max_len: Optional[int] = None
) -> jax.Array:
    """Per-token weights w with num = sum(w * per_token_loss); they depend only on the token's own row.

    token_mean:               w = mask                      (den: trained tokens, DAPO)
    seq_mean_token_mean:      w = mask / tokens_in_sequence (den: sequences, GRPO)
    seq_mean_token_sum_norm:  w = mask / max_len            (den: sequences, Dr. GRPO — a fixed length so that
                                                             long and short answers weigh per token alike)
    """
    mask = mask.astype(jnp.float32)
    if aggregation == "token_mean":
        return mask
    if aggregation == "seq_mean_token_mean":
        return mask / jnp.maximum(segment_lengths(mask, segment_ids), 1.0)
    if aggregation == "seq_mean_token_sum_norm":
        if not max_len or max_len <= 0:
            raise ValueError("aggregation 'seq_mean_token_sum_norm' needs max_len > 0 (the fixed generation length)")
        return mask / float(max_len)
    raise ValueError(f"unknown aggregation {aggregation!r}; choose one of {AGGREGATIONS}")


def aggregation_denominator(tokens, sequences, aggregation: str):
    if aggregation == "token_mean":
        return tokens
    if aggregation in ("seq_mean_token_mean", "seq_mean_token_sum_norm"):
        return sequences
    raise ValueError(f"unknown aggregation {aggregation!r}; choose one of {AGGREGATIONS}")


def _row_counts(mask, segment_ids):
    """Per row: trained tokens and sequences with >= 1 trained token. Both float32 [B]."""
    mask = mask.astype(jnp.float32)
    seg_len = segment_lengths(mask, segment_ids)
    tokens = mask.sum(axis=1)
    # Each trained token contributes 1 / (its sequence's trained tokens), so a sequence sums to exactly 1.
    sequences = jnp.where(mask > 0, mask / jnp.maximum(seg_len, 1e-12), 0.0).sum(axis=1)
    return tokens, sequences


def batch_counts(batch: TokenBatch, num_tasks: Optional[int] = None) -> Counts:
    """Per-task token and sequence counts of a (full) batch; jit-able. Filler rows (task -1) count nowhere."""
    k = len(TASKS) if num_tasks is None else num_tasks
    tok, seq = _row_counts(batch.loss_mask, batch.segment_ids)
    onehot = (batch.task_id[:, None] == jnp.arange(k, dtype=jnp.int32)[None, :]).astype(jnp.float32)
    return Counts(tokens=onehot.T @ tok, sequences=onehot.T @ seq)


def counts_metrics(counts: Counts) -> dict[str, jax.Array]:
    """`{task}/tokens` and `{task}/sequences` for logging (once per step, not per micro-batch)."""
    out = {}
    for name, i in TASKS.items():
        if i < counts.tokens.shape[0]:
            out[f"{name}/tokens"] = counts.tokens[i]
            out[f"{name}/sequences"] = counts.sequences[i]
    return out


def aggregate(
    per_token: jax.Array,
    mask: jax.Array,
    segment_ids: jax.Array,
    aggregation: str = "token_mean",
    *,
    max_len: Optional[int] = None,
    den: Optional[jax.Array] = None,
) -> LossTerm:
    """Reduces a [B, T] per-token loss to LossTerm(num, den). `den` defaults to this batch's own count; pass the
    full batch's count (see `batch_counts`) when this is a micro-batch."""
    chex.assert_equal_shape([per_token, mask, segment_ids])
    w = aggregation_weights(mask, segment_ids, aggregation, max_len)
    num = jnp.sum(jnp.where(w != 0, per_token * w, 0.0))
    if den is None:
        tok, seq = _row_counts(mask, segment_ids)
        den = aggregation_denominator(tok.sum(), seq.sum(), aggregation)
    return LossTerm(num=num, den=jnp.asarray(den, jnp.float32))


# ----------------------------------------------------------------------------------------------------------------
# Per-token loss kernels: (loss [B, T], stats {name: [B, T]}); stats are token-averaged into metrics.

LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: a ratio beyond this is already clipped or a bug, and must not overflow


def ppo_clip_per_token(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    mask: jax.Array,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: Optional[float] = None,
):
    """PPO clipped surrogate, as a loss to minimise: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)).

    r = exp(logp - old_logp). With eps_high > eps_low this is DAPO's clip-higher. With `dual_clip = c > 1`,
    tokens with A < 0 have their loss capped at -A * c (the gradient vanishes there), so one very unlikely
    old-policy token with a huge ratio cannot dominate the step.
    stats: clip_frac_low (A < 0, r < 1 - eps_low), clip_frac_high (A > 0, r > 1 + eps_high) — the tokens whose
    gradient the clip removes; dual_clip_frac; approx_kl (k3 estimate of KL(old || new)); ratio_mean.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (e.g. 3 or 10), got {dual_clip}")
    valid = mask != 0
    # Masked slots may hold garbage old log-probs; zero the log-ratio before exp so neither value nor grad is NaN.
    log_ratio = jnp.where(valid, logprobs - old_logprobs, 0.0)
    log_ratio = jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    adv = jnp.where(valid, advantages, 0.0)
    unclipped = -adv * ratio
    clipped = -adv * jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    # max(unclipped, clipped) by an explicit branch: at a ratio exactly on a clip point where the loss is smooth,
    # jnp.maximum's and jnp.clip's tie rules would each halve the gradient (3/4 of -A r in all).
    loss = jnp.where(clipped > unclipped, clipped, unclipped)
    stats = {
        "clip_frac_low": ((adv < 0) & (ratio < 1.0 - eps_low)).astype(jnp.float32),
        "clip_frac_high": ((adv > 0) & (ratio > 1.0 + eps_high)).astype(jnp.float32),
        "ratio_mean": ratio,
        "approx_kl": jax.lax.stop_gradient((ratio - 1.0) - log_ratio),
    }
    if dual_clip is not None:
        cap = -adv * dual_clip
        capped = (adv < 0) & (loss > cap)
        loss = jnp.where(capped, cap, loss)
        stats["dual_clip_frac"] = capped.astype(jnp.float32)
    stats = {k: jax.lax.stop_gradient(v) for k, v in stats.items()}
    return loss, stats


KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_per_token(logprobs: jax.Array, ref_logprobs: jax.Array, mask: jax.Array, *, estimator: str = "k3"):
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, with d = logp_ref - logp (Schulman's k1/k2/k3):

    k1 = -d             (unbiased value; as a loss its gradient only pushes log-probs down, not toward ref)
    k2 = d^2 / 2        (biased value; gradient pulls logp toward logp_ref)
    k3 = exp(d) - 1 - d (unbiased, always >= 0; gradient pulls toward ref — the GRPO default)
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")
    valid = mask != 0
    d = jnp.clip(jnp.where(valid, ref_logprobs - logprobs, 0.0), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if estimator == "k1":
        kl = -d
    elif estimator == "k2":
        kl = 0.5 * d**2
    else:
        kl = jnp.exp(d) - 1.0 - d
    return kl, {"kl_ref": jax.lax.stop_gradient(kl)}


def sft_per_token(logprobs: jax.Array, mask: jax.Array):
    """Next-token negative log-likelihood of the target tokens (RL^V verify, supervised verdicts)."""
    nll = -jnp.where(mask != 0, logprobs, 0.0)
    return nll, {"nll": jax.lax.stop_gradient(nll), "target_prob": jax.lax.stop_gradient(jnp.exp(-nll))}


# ----------------------------------------------------------------------------------------------------------------
# Terms: kernels applied to a TokenBatch. A kind maps (logprobs, batch, mask, **options) -> (loss, stats); it is
# registered once (`register_term_kind`) with what the trainer must provide for it.


def _ppo_kernel(logprobs, batch, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None):
    return ppo_clip_per_token(logprobs, batch.old_logprobs, batch.advantages, mask,
                              eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)


def _kl_kernel(logprobs, batch, mask, *, estimator="k3"):
    if batch.ref_logprobs is None:
        raise ValueError(
            "a KL term with weight (beta) > 0 needs TokenBatch.ref_logprobs; run the reference forward pass, or "
            "set beta = 0 to skip it"
        )
    return kl_per_token(logprobs, batch.ref_logprobs, mask, estimator=estimator)


def _sft_kernel(logprobs, batch, mask):
    return sft_per_token(logprobs, mask)


Kernel = Callable[..., tuple[jax.Array, dict[str, jax.Array]]]


class TermKind(NamedTuple):
    """What a loss-term kind is: its per-token kernel and what it needs from the trainer.

    kernel:          (logprobs [B, T], batch, mask [B, T], **options) -> (per-token loss [B, T], {stat: [B, T]})
    needs_reference: it reads TokenBatch.ref_logprobs, so the trainer keeps a frozen reference and runs its forward
    supervised:      its targets are given, not sampled (SFT, RL^V's verdict token): its rows are scored at
                     temperature 1 whatever the sampling temperature, so the verifier trained on them is the one
                     `inference.verifier` reads
    """

    kernel: Kernel
    needs_reference: bool = False
    supervised: bool = False
    # It reads the model's per-token values (a value head on the final hidden state, PPO's critic): the update
    # then computes them in the same forward pass and passes them to the kernel as `values=` ([B, T], TokenBatch
    # layout). Such a term's rows store their own targets in the row fields (see `rl.gae.value_spec`), so they
    # are no sampled rows: the sampler/trainer log-prob gap skips them.
    needs_values: bool = False


TERM_KINDS: dict[str, TermKind] = {}


def register_term_kind(name: str, kernel: Kernel, *, needs_reference: bool = False, supervised: bool = False,
                       needs_values: bool = False) -> TermKind:
    """Adds a loss-term kind, the one step a new loss needs: afterwards `term_spec(name, ...)` builds terms of it
    for any objective, and the trainer reads what it needs from here. Re-registering the same kernel is a no-op;
    another kernel under a taken name is refused."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a term kind needs a non-empty name, got {name!r}")
    kind = TermKind(kernel, bool(needs_reference), bool(supervised), bool(needs_values))
    if name in TERM_KINDS and TERM_KINDS[name] != kind:
        raise ValueError(f"term kind {name!r} is already registered with another kernel or needs; pick a new name")
    TERM_KINDS[name] = kind
    return kind


register_term_kind("ppo_clip", _ppo_kernel)
register_term_kind("kl", _kl_kernel, needs_reference=True)
register_term_kind("sft", _sft_kernel, supervised=True)


def _apply_term(kernel, logprobs, batch, mask, aggregation, max_len, den, tokens_den, options):
    loss, stats = kernel(logprobs, batch, mask, **options)
    term = aggregate(loss, mask, batch.segment_ids, aggregation, max_len=max_len, den=den)
    if tokens_den is None:
        tokens_den = jnp.sum(mask.astype(jnp.float32))
    metrics = {k: safe_divide(jnp.sum(jnp.where(mask != 0, v * mask, 0.0)), tokens_den) for k, v in stats.items()}
    return term, metrics


def _make_term(kind: str):
    def term(
        logprobs: jax.Array,
        batch: TokenBatch,
        *,
        mask: Optional[jax.Array] = None,
        aggregation: str = "token_mean",
        max_len: Optional[int] = None,
        den: Optional[jax.Array] = None,
        tokens_den: Optional[jax.Array] = None,
        **options,
    ) -> tuple[LossTerm, dict[str, jax.Array]]:
        chex.assert_equal_shape([logprobs, batch.loss_mask])
        mask = batch.loss_mask if mask is None else mask
        return _apply_term(TERM_KINDS[kind].kernel, logprobs, batch, mask, aggregation, max_len, den, tokens_den,
                           options)

    term.__name__ = f"{kind}_term"
    term.__doc__ = (
        f"The '{kind}' loss on `batch` (mask defaults to batch.loss_mask): (LossTerm(num, den), token-mean "
        "metrics). `den` / `tokens_den`: global normalisers for micro-batches (default: this batch's counts). "
        "Options are passed to the per-token kernel."
    )
    return term


ppo_clip_term = _make_term("ppo_clip")
kl_term = _make_term("kl")
sft_term = _make_term("sft")


# ----------------------------------------------------------------------------------------------------------------
# Objective: a weighted sum of named terms, each restricted to rows of some tasks


class TermSpec(NamedTuple):
    """One named term of an objective. Hashable, so a tuple of specs is a static jit argument.

    name:        unique; the metric `loss/{name}` reports this term's (unweighted) loss
    kind:        key of TERM_KINDS ("ppo_clip", "kl", "sft", ...)
    tasks:       task names whose rows this term trains on
    weight:      coefficient in the sum (lambda, beta); a weight of 0 removes the term at trace time
    aggregation: one of AGGREGATIONS
    max_len:     the fixed length for "seq_mean_token_sum_norm"
    options:     sorted (key, value) pairs passed to the kernel (eps_low, dual_clip, estimator, ...)
    """

    name: str
    kind: str
    tasks: tuple[str, ...]
    weight: float = 1.0
    aggregation: str = "token_mean"
    max_len: Optional[int] = None
    options: tuple[tuple[str, Any], ...] = ()


def term_spec(kind: str, tasks, *, name: Optional[str] = None, weight: float = 1.0,
              aggregation: str = "token_mean", max_len: Optional[int] = None, **options) -> TermSpec:
    """A term of a registered kind over the rows of `tasks` (a name or names). A task named here for the first
    time is registered (`rl.batch.register_task`): the terms a method builds declare its tasks, before any update
    is traced. `options` go to the kind's kernel (hashable values)."""
    name = name or kind
    if kind not in TERM_KINDS:
        raise ValueError(f"unknown term kind {kind!r}; known: {sorted(TERM_KINDS)} (add one with register_term_kind)")
    tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    if not tasks:
        raise ValueError(f"term {name!r} names no task; give the tasks whose rows it trains on")
    for t in tasks:
        register_task(t)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"term {name!r}: unknown aggregation {aggregation!r}; choose one of {AGGREGATIONS}")
    if aggregation == "seq_mean_token_sum_norm" and not max_len:
        raise ValueError(f"term {name!r}: aggregation 'seq_mean_token_sum_norm' needs max_len")
    return TermSpec(name=name, kind=kind, tasks=tasks, weight=float(weight), aggregation=aggregation,
                    max_len=max_len, options=tuple(sorted(options.items())))


def pg_spec(tasks=("solve",), *, name: str = "pg", weight: float = 1.0, aggregation: str = "token_mean",
            max_len: Optional[int] = None, eps_low: float = 0.2, eps_high: float = 0.2,
            dual_clip: Optional[float] = None) -> TermSpec:
    """PPO-clip policy-gradient term (GRPO/DAPO/CURE/CIPO rows)."""
    return term_spec("ppo_clip", tasks, name=name, weight=weight, aggregation=aggregation, max_len=max_len,
                     eps_low=float(eps_low), eps_high=float(eps_high),
                     dual_clip=None if dual_clip is None else float(dual_clip))


def kl_spec(tasks=("solve",), *, beta: float, estimator: str = "k3", name: str = "kl",
            aggregation: str = "token_mean", max_len: Optional[int] = None) -> TermSpec:
    """KL-to-reference penalty with coefficient beta; beta = 0 drops it (and the need for ref_logprobs)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")
    return term_spec("kl", tasks, name=name, weight=beta, aggregation=aggregation, max_len=max_len,
                     estimator=estimator)


def sft_spec(tasks=("verify",), *, name: str = "sft", weight: float = 1.0, aggregation: str = "token_mean",
             max_len: Optional[int] = None) -> TermSpec:
    """Next-token NLL term (RL^V verify with weight lambda; supervised verdicts)."""
    return term_spec("sft", tasks, name=name, weight=weight, aggregation=aggregation, max_len=max_len)


def active_terms(terms: Sequence[TermSpec]) -> tuple[TermSpec, ...]:
    return tuple(t for t in terms if t.weight != 0.0)


def needs_values(terms: Sequence[TermSpec]) -> bool:
    """Whether any active term reads the model's values (the update then runs the value head too)."""
    return any(TERM_KINDS[t.kind].needs_values for t in active_terms(terms))


def value_task_ids(terms: Sequence[TermSpec]) -> tuple[int, ...]:
    """TASKS ids of the rows trained by value-reading terms: their row fields hold value targets, not sampler
    log-probs (static, sorted)."""
    return tuple(sorted({task_id(x) for t in active_terms(terms) if TERM_KINDS[t.kind].needs_values
                         for x in t.tasks}))


def needs_reference(terms: Sequence[TermSpec]) -> bool:
    """Whether any active term reads ref_logprobs; when False the trainer skips the reference forward pass."""
    return any(TERM_KINDS[t.kind].needs_reference for t in active_terms(terms))


def scoring_temperatures(terms: Sequence[TermSpec], temperature: float) -> tuple[float, ...]:
    """Per task id (index = TASKS id): the temperature its rows are scored at in the update and the reference
    forward -- `temperature` (the sampling one) for tasks trained by a sampled-data term (PPO clip, KL), 1.0 for
    tasks trained only by supervised kinds (`TermKind.supervised`) or by none. A static tuple (a jit argument)."""
    if not temperature > 0:
        raise ValueError(f"the scoring temperature must be > 0 (the sampling temperature; greedy rollouts cannot "
                         f"be trained on with a policy gradient), got {temperature}")
    sampled, supervised = set(), set()
    for t in active_terms(terms):
        (supervised if TERM_KINDS[t.kind].supervised else sampled).update(task_id(x) for x in t.tasks)
    both = sampled & supervised
    if both and temperature != 1.0:
        names = sorted(task_name(i) for i in both)
        raise ValueError(f"tasks {names} are trained by both a supervised and a sampled-data term; at sampling "
                         f"temperature {temperature} their rows would need two scorings. Give the supervised rows "
                         "their own task")
    return tuple(float(temperature) if i in sampled else 1.0 for i in range(max(TASKS.values()) + 1))


def _check_terms(terms):
    if not isinstance(terms, tuple) or not all(isinstance(t, TermSpec) for t in terms):
        raise TypeError("terms must be a tuple of TermSpec (build them with pg_spec / kl_spec / sft_spec)")
    names = [t.name for t in terms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"term names must be unique; repeated: {dup}")


def _per_task_token_means(stats, mask, row_task, ids, counts):
    """{stat: [len(ids)]} token means per task, as one contraction over a row one-hot instead of a reduction
    per (task, stat) pair, which keeps the compiled program small when there are many metrics."""
    names = list(stats)
    # Weighted by the mask like the loss (identical for a 0/1 mask), so a weighted row's metrics match its loss.
    stacked = jnp.stack([jnp.where(mask != 0, stats[k] * mask, 0.0).sum(axis=1) for k in names])  # [S, B]
    onehot = (row_task[:, None] == jnp.asarray(ids, jnp.int32)[None, :]).astype(jnp.float32)  # [B, K']
    sums = stacked @ onehot  # [S, K']
    means = safe_divide(sums, counts.tokens[jnp.asarray(ids, jnp.int32)][None, :])
    return {k: means[j] for j, k in enumerate(names)}


def objective(
    logprobs: jax.Array,
    batch: TokenBatch,
    terms: tuple[TermSpec, ...],
    *,
    counts: Optional[Counts] = None,
    entropy: Optional[jax.Array] = None,
    values: Optional[jax.Array] = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """loss = sum_k weight_k * num_k / den_k over the active terms, and metrics.

    logprobs: float32 [batch, time] in TokenBatch layout (`rl.scoring.next_token_logprobs`).
    terms:    static tuple of TermSpec.
    counts:   `batch_counts(full_batch)` when `batch` is a micro-batch (see the module docstring); default: the
              counts of `batch` itself.
    entropy:  optional [batch, time] (TokenBatch layout) for `{task}/entropy` metrics.
    values:   [batch, time] per-token values (TokenBatch layout) under the params being trained; needed by the
              kinds registered with `needs_values` (PPO's value term), which receive them as `values=`.

    Metrics (all additive over micro-batches given global counts):
      loss/total, loss/{term}        the total and each term's unweighted loss
      {task}/{stat}                  token means per task of each term's stats (e.g. solve/clip_frac_high,
                                     solve/kl_ref, verify/nll), and {task}/entropy
    """
    _check_terms(terms)
    chex.assert_equal_shape([logprobs, batch.loss_mask])
    if counts is None:
        counts = batch_counts(batch)
    k = counts.tokens.shape[0]
    mask_all = batch.loss_mask.astype(jnp.float32)
    total = jnp.zeros((), jnp.float32)
    metrics: dict[str, jax.Array] = {}

    def task_mask(ids):
        rows = jnp.zeros(batch.task_id.shape, bool)
        for i in ids:
            rows = rows | (batch.task_id == i)
        return mask_all * rows[:, None].astype(jnp.float32)

    seen_tasks: list[str] = []
    for spec in active_terms(terms):
        ids = [task_id(t) for t in spec.tasks]
        if max(ids) >= k:
            raise ValueError(f"term {spec.name!r}: task id {max(ids)} >= counts size {k}; recompute batch_counts "
                             "after registering tasks")
        idx = jnp.asarray(ids, jnp.int32)
        den = aggregation_denominator(counts.tokens[idx].sum(), counts.sequences[idx].sum(), spec.aggregation)
        options = dict(spec.options)
        kernel = TERM_KINDS[spec.kind].kernel
        mask = task_mask(ids)
        if TERM_KINDS[spec.kind].needs_values:
            if values is None:
                raise ValueError(f"term {spec.name!r} ({spec.kind}) reads the model's values; pass objective(..., "
                                 "values=...) from a model with a value head")
            chex.assert_equal_shape([values, batch.loss_mask])
            options["values"] = values
        loss_tok, stats = kernel(logprobs, batch, mask, **options)
        term = aggregate(loss_tok, mask, batch.segment_ids, spec.aggregation, max_len=spec.max_len, den=den)
        value = term.value
        metrics[f"loss/{spec.name}"] = value
        total = total + spec.weight * value
        per_task = _per_task_token_means(stats, mask, batch.task_id, ids, counts)
        for t, i in zip(spec.tasks, ids):
            for stat in stats:
                key = f"{t}/{stat}"
                if key in metrics:
                    raise ValueError(f"metric {key!r} is produced by two terms; give one of them other tasks")
                metrics[key] = per_task[stat][ids.index(i)]
            # Value rows carry no policy (their LM head is skipped): no entropy metric for them.
            if t not in seen_tasks and not TERM_KINDS[spec.kind].needs_values:
                seen_tasks.append(t)
    if entropy is not None and seen_tasks:
        chex.assert_equal_shape([entropy, batch.loss_mask])
        ids = [task_id(t) for t in seen_tasks]
        ent = {"entropy": jax.lax.stop_gradient(entropy.astype(jnp.float32))}
        per_task = _per_task_token_means(ent, task_mask(ids), batch.task_id, ids, counts)
        for j, t in enumerate(seen_tasks):
            metrics[f"{t}/entropy"] = per_task["entropy"][j]
    metrics["loss/total"] = total
    return total, metrics


# ----------------------------------------------------------------------------------------------------------------
# Non-finite guard


def finite_flags(metrics: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """bool scalar per term (from the `loss/{term}` metrics; `total` included): True where the loss is finite.

    Jit-able; the trainer refuses the step when any flag is False and names the term(s) with `nonfinite_terms`.
    """
    return {k[len("loss/"):]: jnp.isfinite(v) for k, v in metrics.items() if k.startswith("loss/")}


def nonfinite_terms(flags: Mapping[str, Any]) -> list[str]:
    """Host side: names of the terms whose flag is False (empty when the step is safe)."""
    return sorted(k for k, v in flags.items() if not bool(np.asarray(v)))


def tree_is_finite(tree) -> jax.Array:
    """bool scalar: every leaf of a pytree (e.g. gradients) is finite."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)
