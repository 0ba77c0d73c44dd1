"""An independent, written-out NumPy (float64) reference for the loss and advantage formulas, on hard random cases.

Nothing on the reference side calls a helper of the library: the aggregations are loops over (row, segment)
sequences, the PPO-clip / KL / SFT losses and their derivatives are written out by hand, and so are the advantage
estimators. The library side runs in float32 (as in training), and its gradients are `jax.grad` of the library's
`objective` (or kernel) w.r.t. the per-token log-probs. Values and gradients must agree at rtol = atol = 1e-5,
where atol is scaled by the magnitude of the contributions whenever those are huge (a ratio of exp(20) ~ 5e8 or
a k3 of the same size in a sum; float32 then carries ~1e-7 of *that* magnitude, not of the result).

Hard cases: ragged rows (completions of 0, 1, ... 10 tokens, holes in the mask, padding, rows that pack up to
four sequences with segment ids 1, 2, ...; 0 = padding; a filler row of task -1), non-finite garbage in the
untrained slots, log-ratios of +-30, +-25, +-20.5, +-19.9, ratios 1e-4 .. 1e-2 (relative) either side of
every clip point, and ratios *exactly* on a clip point (1 - eps_low, 1 + eps_high, the dual-clip c, and log-ratios
of exactly +-20). At an exact kink the loss is not differentiable: JAX returns its tie-averaged derivative (e.g.
half of each side for `jnp.maximum` ties), so there the reference only requires the gradient to lie between the
two one-sided derivatives (both are written out), i.e. to be an element of the subdifferential.

A discrepancy this check found, now fixed
----------------------------------------
Where the ratio is *exactly* on a clip point but the PPO loss is smooth there (A > 0 at r == 1 - eps_low, or
A < 0 at r == 1 + eps_high: the unclipped branch is active on both sides, d/dlogp = -A r), the library's gradient
was 3/4 of it: `jnp.clip` has derivative 1/2 at its bound and `jnp.maximum` gives 1/2 to each of two equal
arguments. `ppo_clip_per_token` now picks the branch with `jnp.where`; `test_ppo_gradient_at_smooth_clip_point`
and `test_objective_gradient_at_smooth_clip_point` pin it.

How the library's formulas compare with verl and TRL
-----------------------------------------------------
Read: verl `verl/trainer/ppo/core_algos.py` (compute_policy_loss / compute_policy_loss_vanilla, agg_loss,
kl_penalty, compute_grpo_outcome_advantage, compute_rloo_outcome_advantage,
compute_reinforce_plus_plus_baseline_outcome_advantage) and the actor's KL loss (dp_actor: `kl_loss =
agg_loss(kld, response_mask, loss_agg_mode)`); TRL `trl/trainer/grpo_trainer.py` (`_compute_loss` and the
advantage block of `_generate_and_score_completions`; stored version 000bb3d, plus the `scale_rewards` block of
later versions).

PPO clip
  * Same surrogate everywhere: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)); verl's clip_ratio_low/high and
    TRL's epsilon_low/epsilon_high are the library's eps_low/eps_high (DAPO clip-higher).
  * Log-ratio clamp: the library clamps logp - old_logp to +-LOG_RATIO_CLAMP = 20 before exp (its named choice,
    `rl/losses.py`); verl clamps the same +-20 in compute_policy_loss; TRL's `_compute_loss` does not clamp.
    Beyond the clamp the gradient is 0 (the clamp is flat there), which the reference reproduces.
  * Dual clip: same form as verl (for A < 0 only: min(max(...), -A c)), but optional in the library
    (dual_clip=None by default) where verl always applies clip_ratio_c (default 3). Both require c > 1. TRL's
    version read has no dual clip.
  * Masked slots: the library zeroes the log-ratio / advantage there with `where` before exp, so NaN garbage in
    untrained slots never reaches value or gradient (checked below); verl multiplies by the mask inside
    masked_mean, where a NaN would survive (0 * NaN).

Aggregation (per term)
  * token_mean == verl "token-mean" == TRL "bnpo" (DAPO); seq_mean_token_mean == verl "seq-mean-token-mean" ==
    TRL "grpo". The library counts *sequences* as packed segments with >= 1 trained token; verl and TRL treat
    each row as one sequence (TRL clamps an empty row's token count to 1 and still counts the row).
  * seq_mean_token_sum_norm (Dr. GRPO): library = mean over sequences of (token sum / max_len), max_len a fixed
    constant given by the caller. verl "seq-mean-token-sum-norm" = sum over rows of token sums /
    loss_mask.shape[-1]: the constant is the *padded width* of the batch and there is no division by the number
    of sequences. TRL "dr_grpo" = sum / (rows * max_completion_length): rows of the local batch, empty or not.
  * Normalisers: the library divides by counts of the *full* batch (`counts`), so micro-batch losses and grads
    add up exactly; verl's agg_loss and TRL's grpo / bnpo normalise by the batch they are given.

KL to the reference (d = logp_ref - logp)
  * k1 = -d (verl "kl"/"k1": logp - ref), k2 = d^2 / 2 (verl "mse"/"k2"), k3 = exp(d) - 1 - d (verl
    "low_var_kl"/"k3", TRL's only estimator): same formulas.
  * Clamping differs: the library clamps d to +-20 for all three estimators and never clamps the value; verl
    clamps d to +-20 for k3 only, then clamps the k3 *value* to [-10, 10]; TRL clamps nothing. At d = +30 the
    library's k3 is exp(20) - 21 ~ 4.85e8 with zero gradient, verl's is 10 (also zero gradient).
  * Aggregation: verl aggregates the KL with the policy loss's loss_agg_mode; TRL adds beta * k3 to the
    per-token policy loss before aggregating. Both mean: the KL term is aggregated exactly as the policy term of
    the same task. The reference here aggregates (pg + beta * kl) per token jointly, TRL's way, and the library
    (pg_spec + kl_spec with the same aggregation) must match it.

Advantages
  * GRPO: (r - group mean) / (std + eps), eps *outside* the square root in all three; default std has Bessel's
    correction (ddof = 1) like torch.std in verl and TRL; eps: library 1e-6 = verl, TRL 1e-4. scale = "batch"
    (group mean, std of all rewards of the batch) matches TRL's scale_rewards="batch"; "none" is Dr. GRPO
    (verl norm_adv_by_std_in_grpo=False, TRL scale_rewards="none").
  * Groups: the library's groups are [queries, group] with a `valid` mask (ragged groups); verl groups by index
    (any size). Singleton groups: library 0; verl GRPO sets mean 0, std 1, so A = r / (1 + eps); verl RLOO
    leaves A = r. All-equal groups: 0 in all (the library decides it exactly, not from the std).
  * RLOO: r_i - mean_{j != i} r_j = n / (n - 1) (r_i - mean): same as verl.
  * REINFORCE++-baseline: the library whitens the centred values over the *sequences* of the groups that carry
    signal, with (std + eps); verl whitens over all *tokens* (long responses weigh more), zero-signal groups and
    singletons included, with rsqrt(var + 1e-8) and Bessel's correction over the token count.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_reason.rl import advantages as adv
from jaxrl_reason.rl import batch as tb
from jaxrl_reason.rl import losses as L

# The library's named choice for the log-ratio clamp (`LOG_RATIO_CLAMP` in rl/losses.py): log(pi / pi_old) and
# log(pi_ref / pi) are clamped to +-20 before exp. Written out here and checked against the library's constant.
CLAMP = 20.0
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
RTOL = ATOL = 1e-5
# A log-ratio this close to a kink counts as on it: float32 rounds logp - old_logp (|logp| <= ~40) by <= 2e-6.
KINK_TOL = 1e-5
B, T, MAX_LEN, N_MICRO = 12, 24, 20, 4  # MAX_LEN != T: Dr. GRPO's constant is the generation budget, not the width
SEEDS = (0, 1, 2)
ROW_TASKS = ["solve"] * 3 + ["verify"] * 2 + ["critique"] * 2 + ["guided_solve"] * 2 + ["correct"] * 2 + [None]


def test_reference_constants_match_library():
    assert L.LOG_RATIO_CLAMP == CLAMP
    assert set(L.AGGREGATIONS) == set(AGGREGATIONS)
    assert set(L.KL_ESTIMATORS) == {"k1", "k2", "k3"}
    assert all(t in tb.TASKS for t in ROW_TASKS if t is not None)


# ----------------------------------------------------------------------------------------------------------------
# Checking helpers


def assert_close(got, want, scale=0.0, what=""):
    """|got - want| <= ATOL + RTOL * max(|want|, scale); `scale` is the magnitude of the summed contributions."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    tol = ATOL + RTOL * np.maximum(np.abs(want), scale)
    bad = ~(np.abs(got - want) <= tol)
    assert not bad.any(), f"{what}: {bad.sum()} mismatches, e.g. got {got[bad][:4]} want {want[bad][:4]}"


def assert_in_interval(got, lo, hi, scale, what=""):
    """Each got lies in [lo, hi] (the one-sided derivatives; lo == hi off the kinks) up to ATOL + RTOL * scale."""
    got = np.asarray(got, np.float64)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    tol = ATOL + RTOL * np.maximum(scale, np.maximum(np.abs(lo), np.abs(hi)))
    bad = ~((got >= lo - tol) & (got <= hi + tol))
    assert not bad.any(), (f"{what}: {bad.sum()} gradients outside the reference, e.g. got {got[bad][:4]}, "
                           f"reference in [{lo[bad][:4]}, {hi[bad][:4]}]")


_exp32 = jax.jit(jnp.exp)


@functools.lru_cache(maxsize=None)
def exact_log(target: float) -> float:
    """A float32 x whose float32 exp (as XLA computes it) is exactly float32(target): a ratio *on* a clip point."""
    t32 = np.float32(target)
    x0 = np.float64(np.float32(np.log(np.float64(t32))))
    cand = (x0 + np.arange(-256, 257) * np.float64(np.spacing(np.float32(x0)))).astype(np.float32)
    hits = cand[np.asarray(_exp32(jnp.asarray(cand))) == t32]
    assert hits.size, f"no float32 x with exp(x) == {target}"
    return float(hits[len(hits) // 2])


# ----------------------------------------------------------------------------------------------------------------
# Written-out reference formulas (float64)


def ref_ppo(x, a, eps_low, eps_high, dual_clip):
    """PPO-clip loss and d loss / d logp for log-ratios x = logp - old_logp (unclamped) and advantages a.

    L = max(-a r, -a clip(r, 1 - eps_low, 1 + eps_high)),  r = exp(clip(x, -20, 20));
    with dual clip c and a < 0: L = min(L, -a c).
    dL/dlogp = -a r where the unclipped branch is active (inside the clip range, or where it is the larger one),
    0 where the clipped branch or the dual-clip cap is active, and 0 where |x| > 20 (the clamp is flat).
    Returns (loss, grad_lo, grad_hi, on_kink, smooth_tie); grad_lo == grad_hi off the kinks.
    """
    lo_b, hi_b = 1.0 - eps_low, 1.0 + eps_high

    def value(x):
        r = np.exp(np.clip(x, -CLAMP, CLAMP))
        out = np.maximum(-a * r, -a * np.clip(r, lo_b, hi_b))
        if dual_clip is not None:
            out = np.where(a < 0, np.minimum(out, -a * dual_clip), out)
        return out

    def slope(x):  # valid off every kink
        r = np.exp(np.clip(x, -CLAMP, CLAMP))
        unclipped, clipped = -a * r, -a * np.clip(r, lo_b, hi_b)
        g = np.where(((r > lo_b) & (r < hi_b)) | (unclipped > clipped), -a * r, 0.0)
        if dual_clip is not None:
            g = np.where((a < 0) & (np.maximum(unclipped, clipped) > -a * dual_clip), 0.0, g)
        return np.where(np.abs(x) < CLAMP, g, 0.0)

    kinks = [np.log(lo_b), np.log(hi_b), CLAMP, -CLAMP] + ([np.log(dual_clip)] if dual_clip is not None else [])
    xs, on_kink = x.copy(), np.zeros(x.shape, bool)
    for k in kinks:
        near = np.abs(x - k) < KINK_TOL
        xs, on_kink = np.where(near, k, xs), on_kink | near
    g = slope(x)
    h = 1e-9
    g_lo, g_hi = np.where(on_kink, slope(xs - h), g), np.where(on_kink, slope(xs + h), g)
    # On a clip point but smooth there: both one-sided derivatives agree (A > 0 at r = 1 - eps_low, A < 0 at
    # r = 1 + eps_high: the unclipped branch is active on both sides), so the gradient is exactly -A r.
    smooth_tie = on_kink & (g_lo != 0) & (np.abs(g_lo - g_hi) <= 1e-6 * np.abs(g_lo))
    return value(x), g_lo, g_hi, on_kink, smooth_tie


def ref_ppo_stats(x, a, eps_low, eps_high, dual_clip):
    r = np.exp(np.clip(x, -CLAMP, CLAMP))
    out = {"clip_frac_low": (a < 0) & (r < 1 - eps_low), "clip_frac_high": (a > 0) & (r > 1 + eps_high)}
    if dual_clip is not None:
        l1 = np.maximum(-a * r, -a * np.clip(r, 1 - eps_low, 1 + eps_high))
        out["dual_clip_frac"] = (a < 0) & (l1 > -a * dual_clip)
    return out


def ref_kl(lp, ref, estimator):
    """Schulman's estimators of KL(pi || pi_ref) with d = clip(ref - logp, -20, 20) and their d / d logp:

    k1 = -d            -> +1
    k2 = d^2 / 2       -> -d
    k3 = e^d - 1 - d   -> 1 - e^d
    (times 0 where |ref - logp| > 20). Returns (value, grad_lo, grad_hi, on_kink).
    """
    raw = ref - lp
    d = np.clip(raw, -CLAMP, CLAMP)
    if estimator == "k1":
        val, g = -d, np.ones_like(d)
    elif estimator == "k2":
        val, g = 0.5 * d**2, -d
    else:
        val, g = np.exp(d) - 1.0 - d, 1.0 - np.exp(d)
    on_kink = np.abs(np.abs(raw) - CLAMP) < KINK_TOL
    inside = np.where(np.abs(raw) < CLAMP, g, 0.0)
    return val, np.where(on_kink, g, inside), np.where(on_kink, 0.0, inside), on_kink


def ref_aggregate(per_token, mask, seg, aggregation, max_len):
    """(value, d value / d per_token, sequences, tokens), written as loops over the (row, segment) sequences:

    token_mean:               sum over all trained tokens / number of trained tokens
    seq_mean_token_mean:      mean over sequences of (mean over the sequence's trained tokens)
    seq_mean_token_sum_norm:  mean over sequences of (sum over the sequence's trained tokens / max_len)
    A sequence without trained tokens does not count; padding (segment 0) is no sequence.
    """
    seqs = []
    for b in range(mask.shape[0]):
        for s in np.unique(seg[b]):
            if s == 0:
                continue
            idx = np.flatnonzero((seg[b] == s) & (mask[b] > 0))
            if idx.size:
                seqs.append((b, idx))
    n_tok = sum(idx.size for _, idx in seqs)
    n_seq = len(seqs)
    grad = np.zeros(mask.shape)
    total = 0.0
    if aggregation == "token_mean":
        for b, idx in seqs:
            total += per_token[b, idx].sum()
            grad[b, idx] = 1.0
        den = n_tok
    elif aggregation == "seq_mean_token_mean":
        for b, idx in seqs:
            total += per_token[b, idx].sum() / idx.size
            grad[b, idx] = 1.0 / idx.size
        den = n_seq
    elif aggregation == "seq_mean_token_sum_norm":
        for b, idx in seqs:
            total += per_token[b, idx].sum() / max_len
            grad[b, idx] = 1.0 / max_len
        den = n_seq
    else:
        raise ValueError(aggregation)
    den = max(den, 1)  # an empty term is 0
    return total / den, grad / den, n_seq, n_tok


def _term_mask(batch, tasks):
    rows = np.isin(np.asarray(batch.task_id), [tb.TASKS[t] for t in tasks])
    return (np.asarray(batch.loss_mask) > 0) & rows[:, None]


def ref_term_tokens(term, lp, batch):
    """(per-token loss, grad_lo, grad_hi, mask, smooth_tie) of one term on all positions (float64)."""
    mask = _term_mask(batch, term["tasks"])
    old = np.where(mask, np.asarray(batch.old_logprobs, np.float64), 0.0)
    a = np.where(mask, np.asarray(batch.advantages, np.float64), 0.0)
    tie = np.zeros(lp.shape, bool)
    if term["kind"] == "ppo_clip":
        val, lo, hi, _, tie = ref_ppo(np.where(mask, lp - old, 0.0), a, term["eps_low"], term["eps_high"],
                                      term["dual_clip"])
    elif term["kind"] == "kl":
        ref = np.where(mask, np.asarray(batch.ref_logprobs, np.float64), lp)
        val, lo, hi, _ = ref_kl(lp, ref, term["estimator"])
    elif term["kind"] == "sft":
        val, lo, hi = -lp, -np.ones_like(lp), -np.ones_like(lp)
    else:
        raise ValueError(term["kind"])
    return np.where(mask, val, 0.0), np.where(mask, lo, 0.0), np.where(mask, hi, 0.0), mask, mask & tie


def ref_objective(terms, lp, batch, max_len=MAX_LEN):
    """Reference total loss, per-term losses, gradient interval w.r.t. logp, the magnitude scales, and the tokens
    sitting exactly on a clip point where the PPO loss is smooth (see `test_ppo_gradient_at_smooth_clip_point`).

    The total is computed the verl / TRL way: each policy term and the KL term over the same tasks are summed per
    token, loss_pg + beta * kl, and aggregated once with the policy term's aggregation.
    """
    lp = np.asarray(lp, np.float64)
    seg = np.asarray(batch.segment_ids)
    per_term, g_lo, g_hi, g_scale = {}, np.zeros(lp.shape), np.zeros(lp.shape), np.zeros(lp.shape)
    abs_total = 0.0
    tokens = {}
    ties = np.zeros(lp.shape, bool)
    for term in terms:
        val, lo, hi, mask, tie = ref_term_tokens(term, lp, batch)
        tokens[term["name"]] = (val, lo, hi, mask)
        ties |= tie
        value, dagg, _, _ = ref_aggregate(val, mask, seg, term["aggregation"], max_len)
        abs_value, _, _, _ = ref_aggregate(np.abs(val), mask, seg, term["aggregation"], max_len)
        per_term[term["name"]] = (value, abs_value)
        abs_total += term["weight"] * abs_value
        g_lo += term["weight"] * dagg * lo
        g_hi += term["weight"] * dagg * hi
        g_scale += term["weight"] * dagg * np.maximum(np.abs(lo), np.abs(hi))
    # Joint aggregation: policy + beta * KL per token (TRL adds them per token; verl aggregates both alike).
    total = 0.0
    used = set()
    for term in terms:
        if term["kind"] != "ppo_clip":
            continue
        kls = [k for k in terms if k["kind"] == "kl" and k["tasks"] == term["tasks"]]
        per_token = term["weight"] * tokens[term["name"]][0]
        for k in kls:
            assert k["aggregation"] == term["aggregation"]  # the convention under test
            per_token = per_token + k["weight"] * tokens[k["name"]][0]
            used.add(k["name"])
        total += ref_aggregate(per_token, tokens[term["name"]][3], seg, term["aggregation"], max_len)[0]
        used.add(term["name"])
    for term in terms:
        if term["name"] not in used:
            total += term["weight"] * per_term[term["name"]][0]
    return total, per_term, (g_lo, g_hi, g_scale), abs_total, ties


# ----------------------------------------------------------------------------------------------------------------
# Random ragged batches with extreme log-ratios


def log_ratio_mixture(rng, n, ratios):
    """n log-ratios: typical, 1e-4..1e-2 (relative) either side of each clip point, extreme, exactly on a clip
    point, wide. Returns (x, exact) where `exact` marks tokens that must use old_logp = 0 so that
    logp - old_logp == x exactly in float32."""
    kind = rng.choice(5, size=n, p=[0.3, 0.2, 0.2, 0.15, 0.15])
    x = rng.normal(0.0, 0.4, n)
    near_r = rng.choice(ratios, n) * (1.0 + rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-4, -2, n))
    x = np.where(kind == 1, np.log(near_r), x)
    x = np.where(kind == 2, rng.choice([-30.0, 30.0, -25.0, 25.0, -20.5, 20.5, -19.9, 19.9, 12.0, -12.0], n), x)
    exact_x = [exact_log(r) for r in ratios] + [CLAMP, -CLAMP]
    x = np.where(kind == 3, rng.choice(exact_x, n), x)
    x = np.where(kind == 4, rng.normal(0.0, 3.0, n), x)
    return x.astype(np.float32), kind == 3


def make_batch(seed, ratios):
    """A TokenBatch of ROW_TASKS rows (shuffled) with packed segments, holes, padding and garbage, and lp."""
    rng = np.random.default_rng(seed)
    tasks = [ROW_TASKS[i] for i in rng.permutation(len(ROW_TASKS))]
    tokens = rng.integers(1, 50, (B, T)).astype(np.int32)
    positions = np.zeros((B, T), np.int32)
    seg = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.float32)
    a = np.zeros((B, T), np.float64)
    first_solve, first_verify = tasks.index("solve"), tasks.index("verify")
    for b, task in enumerate(tasks):
        if task is None:
            tokens[b] = 0
            continue
        if task == "verify":
            plan = [(int(rng.integers(2, 8)), 1)]  # one verdict token
        else:
            plan = [(int(rng.integers(1, 4)), int(rng.choice([0, 1, 1, 2, 3, 5, 8, 10]))) for _ in range(4)]
            plan = plan[: int(rng.integers(1, 5))]
        if b == first_solve:
            plan = [(2, 1), (1, 0)] + plan  # a one-token completion, then a prompt-only (untrained) sequence
        t = 0
        for s, (p, c) in enumerate(plan, start=1):
            c = min(c, T - t - p)
            if c < 0:
                break
            seg[b, t:t + p + c] = s
            positions[b, t:t + p + c] = np.arange(p + c)
            mask[b, t + p:t + p + c] = 1.0
            if c >= 3 and rng.random() < 0.4:  # a hole (tool output, forced prefix)
                mask[b, t + p + int(rng.integers(0, c))] = 0.0
            seq_a = 0.0 if rng.random() < 0.1 else rng.normal(0.0, 1.5)
            a[b, t + p:t + p + c] = seq_a + (rng.normal(0.0, 0.5, c) if rng.random() < 0.3 else 0.0)
            t += p + c
        tokens[b, t:] = 0
    if mask[first_verify].sum() != 1:
        raise AssertionError("verify rows are built with one trained token")

    m = mask > 0
    n = int(m.sum())
    x, exact = log_ratio_mixture(rng, n, ratios)
    old = rng.uniform(-8.0, 0.0, n).astype(np.float32)
    old[exact] = 0.0
    lp_tok = (old + x).astype(np.float32)
    lp_tok[exact] = x[exact]
    # KL log-ratios d = ref - logp: typical, extreme, and exactly +-20 (logp = -4 so that ref - logp is exact).
    dkind = rng.choice(3, size=n, p=[0.6, 0.25, 0.15])
    d = rng.normal(0.0, 0.5, n)
    d = np.where(dkind == 1, rng.choice([-30.0, 30.0, -25.0, 25.0, -19.9, 19.9, 5.0, -5.0], n), d)
    kl_exact = (dkind == 2) & ~exact
    lp_tok[kl_exact] = -4.0
    old[kl_exact] = (np.float32(-4.0) - x[kl_exact]).astype(np.float32)
    ref_tok = (lp_tok + d).astype(np.float32)
    ref_tok[kl_exact] = np.where(rng.random(kl_exact.sum()) < 0.5, 16.0, -24.0).astype(np.float32)

    # Untrained slots: garbage, NaN on odd seeds (the library documents masked slots may hold anything).
    garbage = np.nan if seed % 2 else 1e4
    lp = rng.normal(0.0, 50.0, (B, T)).astype(np.float32)
    old_a = np.full((B, T), garbage, np.float32)
    ref_a = np.full((B, T), -garbage, np.float32)
    adv_a = np.full((B, T), garbage, np.float32)
    lp[m], old_a[m], ref_a[m], adv_a[m] = lp_tok, old, ref_tok, a[m].astype(np.float32)
    task_ids = np.asarray([tb.PAD_TASK_ID if t is None else tb.TASKS[t] for t in tasks], np.int32)
    batch = tb.TokenBatch(tokens=tokens, positions=positions, segment_ids=seg, loss_mask=mask, advantages=adv_a,
                          old_logprobs=old_a, ref_logprobs=ref_a, task_id=task_ids)
    tb.validate_token_batch(batch)
    return batch, lp


# ----------------------------------------------------------------------------------------------------------------
# 1. Aggregations, packed rows


@functools.partial(jax.jit, static_argnames=("aggregation",))
def _lib_aggregate(per_token, mask, seg, aggregation):
    def f(x):
        term = L.aggregate(x, mask, seg, aggregation, max_len=MAX_LEN)
        return term.value, term
    (_, term), g = jax.value_and_grad(f, has_aux=True)(per_token)
    return term.num, term.den, term.value, g


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_aggregations_match_written_out_loops(aggregation):
    for seed in SEEDS:
        batch, _ = make_batch(seed, (0.8, 1.2))
        rng = np.random.default_rng(100 + seed)
        per_token = (rng.normal(size=(B, T)) * 10.0 ** rng.uniform(-2, 6, (B, T))).astype(np.float32)
        per_token[batch.loss_mask == 0] = np.nan if seed % 2 else 1e30  # never read
        mask, seg = batch.loss_mask, batch.segment_ids
        num, den, value, grad = _lib_aggregate(per_token, mask, seg, aggregation)
        pt = np.where(mask > 0, per_token.astype(np.float64), 0.0)
        want, dwant, n_seq, n_tok = ref_aggregate(pt, mask, seg, aggregation, MAX_LEN)
        scale = ref_aggregate(np.abs(pt), mask, seg, aggregation, MAX_LEN)[0]
        assert (np.asarray(seg).max(axis=1) >= 2).sum() >= 2  # rows that pack several sequences
        np.testing.assert_allclose(den, n_tok if aggregation == "token_mean" else n_seq, rtol=1e-6)
        assert_close(value, want, scale, f"{aggregation} value, seed {seed}")
        assert_close(num, want * max(float(den), 1.0), scale * float(den), f"{aggregation} num, seed {seed}")
        assert_close(grad, dwant, 0.0, f"{aggregation} d value / d loss, seed {seed}")


# ----------------------------------------------------------------------------------------------------------------
# 2. PPO clip per token (clip-higher, dual clip, clamp), values, gradients, clip statistics

PPO_CONFIGS = [  # (eps_low, eps_high, dual_clip)
    (0.2, 0.2, None),
    (0.2, 0.28, None),   # DAPO clip-higher
    (0.2, 0.28, 3.0),    # + dual clip (verl's default c)
    (0.1, 0.3, 1.2),     # c < 1 + eps_high: the cap bites inside the clip range for A < 0
]


@functools.partial(jax.jit, static_argnames=("eps_low", "eps_high", "dual_clip"))
def _lib_ppo(lp, old, a, mask, eps_low, eps_high, dual_clip):
    def f(x):
        loss, stats = L.ppo_clip_per_token(x, old, a, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
        return loss.sum(), (loss, stats)
    (_, (loss, stats)), g = jax.value_and_grad(f, has_aux=True)(lp)
    return loss, stats, g


def _kernel_case(seed, ratios, shape=(8, 64)):
    rng = np.random.default_rng(seed)
    n = shape[0] * shape[1]
    x, exact = log_ratio_mixture(rng, n, ratios)
    old = rng.uniform(-8.0, 0.0, n).astype(np.float32)
    old[exact] = 0.0
    lp = np.where(exact, x, old + x).astype(np.float32)
    a = np.where(rng.random(n) < 0.1, 0.0, rng.normal(0.0, 1.5, n) * 10.0 ** rng.uniform(-1, 1, n))
    mask = (rng.random(n) < 0.9).astype(np.float32)
    old[mask == 0] = np.nan
    a = np.where(mask == 0, np.nan, a).astype(np.float32)
    return [v.reshape(shape) for v in (lp, old, a, mask, exact)]


@pytest.mark.parametrize("eps_low,eps_high,dual_clip", PPO_CONFIGS)
def test_ppo_clip_per_token_matches_written_out_formula(eps_low, eps_high, dual_clip):
    ratios = (1 - eps_low, 1 + eps_high) + ((dual_clip,) if dual_clip is not None else ())
    for seed in SEEDS:
        lp, old, a, mask, exact = _kernel_case(seed, ratios)
        loss, stats, g = _lib_ppo(lp, old, a, mask, eps_low, eps_high, dual_clip)
        m = mask > 0
        x = np.where(m, lp.astype(np.float64) - np.where(m, old, 0.0), 0.0)
        a64 = np.where(m, a, 0.0).astype(np.float64)
        want, g_lo, g_hi, on_kink, tie = ref_ppo(x, a64, eps_low, eps_high, dual_clip)
        assert on_kink[m].sum() >= 10
        tie &= m  # checked in test_ppo_gradient_at_smooth_clip_point
        # the exact tokens really sit on the clip points, as the library computes the ratio
        r_lib = np.asarray(stats["ratio_mean"])[exact & m]
        on_bound = np.isin(r_lib, np.float32(np.asarray(ratios)))
        assert on_bound.sum() >= 5, r_lib
        where = f"eps=({eps_low}, {eps_high}), c={dual_clip}, seed {seed}"
        assert_close(np.asarray(loss)[m], want[m], 0.0, f"loss {where}")
        np.testing.assert_array_equal(np.asarray(loss)[~m], 0.0)  # NaN garbage never leaks
        sel = m & ~tie
        assert_in_interval(np.asarray(g)[sel], g_lo[sel], g_hi[sel], 0.0, f"d loss / d logp {where}")
        np.testing.assert_array_equal(np.asarray(g)[~m], 0.0)
        for k, v in ref_ppo_stats(x, a64, eps_low, eps_high, dual_clip).items():
            sel = m & ~on_kink
            np.testing.assert_array_equal(np.asarray(stats[k])[sel], v[sel].astype(np.float32), err_msg=k)
        # extreme log-ratios beyond the clamp carry no gradient
        beyond = m & (np.abs(x) > CLAMP + 1e-3)
        assert beyond.any() and np.all(np.asarray(g)[beyond] == 0.0)


@pytest.mark.parametrize("eps_low,eps_high,dual_clip", PPO_CONFIGS)
def test_ppo_gradient_at_smooth_clip_point(eps_low, eps_high, dual_clip):
    ratios = (1 - eps_low, 1 + eps_high) + ((dual_clip,) if dual_clip is not None else ())
    lp, old, a, mask, _ = _kernel_case(0, ratios)
    _, _, g = _lib_ppo(lp, old, a, mask, eps_low, eps_high, dual_clip)
    m = mask > 0
    x = np.where(m, lp.astype(np.float64) - np.where(m, old, 0.0), 0.0)
    _, g_lo, _, _, tie = ref_ppo(x, np.where(m, a, 0.0).astype(np.float64), eps_low, eps_high, dual_clip)
    tie &= m
    assert tie.sum() >= 5  # the case does hold such tokens; the comparison below is the one that fails
    assert_close(np.asarray(g)[tie], g_lo[tie], 0.0, f"d loss / d logp at smooth clip points, eps=({eps_low}, "
                 f"{eps_high}), c={dual_clip}")


# ----------------------------------------------------------------------------------------------------------------
# 3a. KL estimators per token


@functools.partial(jax.jit, static_argnames=("estimator",))
def _lib_kl(lp, ref, mask, estimator):
    def f(x):
        kl, _ = L.kl_per_token(x, ref, mask, estimator=estimator)
        return jnp.sum(jnp.where(mask != 0, kl, 0.0)), kl
    (_, kl), g = jax.value_and_grad(f, has_aux=True)(lp)
    return kl, g


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_match_written_out_formula(estimator):
    for seed in SEEDS:
        rng = np.random.default_rng(50 + seed)
        shape = (8, 64)
        lp = rng.uniform(-8.0, 0.0, shape).astype(np.float32)
        d = np.where(rng.random(shape) < 0.3, rng.choice([-30.0, 30.0, -25.0, 25.0, -19.9, 19.9, 8.0], shape),
                     rng.normal(0.0, 1.0, shape))
        ref = (lp + d).astype(np.float32)
        exact = rng.random(shape) < 0.1
        lp[exact] = -4.0
        ref[exact] = np.where(rng.random(exact.sum()) < 0.5, 16.0, -24.0)  # ref - logp exactly +-20
        mask = (rng.random(shape) < 0.9).astype(np.float32)
        ref[mask == 0] = np.nan
        kl, g = _lib_kl(lp, ref, mask, estimator)
        m = mask > 0
        want, g_lo, g_hi, on_kink = ref_kl(lp.astype(np.float64), ref.astype(np.float64), estimator)
        assert on_kink[m].sum() >= 5
        assert_close(np.asarray(kl)[m], want[m], 0.0, f"{estimator} value, seed {seed}")
        assert_in_interval(np.asarray(g)[m], g_lo[m], g_hi[m], 0.0, f"{estimator} d kl / d logp, seed {seed}")
        np.testing.assert_array_equal(np.asarray(g)[~m], 0.0)
        assert np.all(np.isfinite(np.asarray(kl)))


# ----------------------------------------------------------------------------------------------------------------
# 3b + 4. The whole objective: several terms on rows of several tasks, KL aggregated as the policy term,
# global counts, micro-batch accumulation


def term_defs(i):
    """Terms of one objective; the KL over a set of tasks always uses that set's policy aggregation."""
    a1, a2 = AGGREGATIONS[i], AGGREGATIONS[(i + 1) % 3]
    est1, est2 = ("k3", "k1", "k2")[i], ("k2", "k3", "k1")[i]
    return [
        dict(name="pg", kind="ppo_clip", tasks=("solve", "guided_solve"), weight=1.0, aggregation=a1,
             eps_low=0.2, eps_high=0.28, dual_clip=3.0),
        dict(name="kl", kind="kl", tasks=("solve", "guided_solve"), weight=0.04, aggregation=a1, estimator=est1),
        dict(name="pg2", kind="ppo_clip", tasks=("critique", "correct"), weight=0.5, aggregation=a2,
             eps_low=0.15, eps_high=0.15, dual_clip=None),
        dict(name="kl2", kind="kl", tasks=("critique", "correct"), weight=0.1, aggregation=a2, estimator=est2),
        dict(name="sft", kind="sft", tasks=("verify",), weight=0.7, aggregation=a1),
    ]


OBJECTIVE_RATIOS = (0.8, 1.28, 3.0, 0.85, 1.15)  # the clip points of pg and pg2


def lib_specs(defs):
    specs = []
    for d in defs:
        common = dict(name=d["name"], aggregation=d["aggregation"], max_len=MAX_LEN)
        if d["kind"] == "ppo_clip":
            specs.append(L.pg_spec(d["tasks"], weight=d["weight"], eps_low=d["eps_low"], eps_high=d["eps_high"],
                                   dual_clip=d["dual_clip"], **common))
        elif d["kind"] == "kl":
            specs.append(L.kl_spec(d["tasks"], beta=d["weight"], estimator=d["estimator"], **common))
        else:
            specs.append(L.sft_spec(d["tasks"], weight=d["weight"], **common))
    return tuple(specs)


@functools.partial(jax.jit, static_argnums=(2,))
def _lib_objective(lp, batch, terms, counts):
    def f(x):
        return L.objective(x, batch, terms, counts=counts)
    (loss, metrics), g = jax.value_and_grad(f, has_aux=True)(lp)
    return loss, {k: v for k, v in metrics.items() if k.startswith("loss/")}, g


def ref_counts(batch):
    """Per task id: trained tokens and sequences (segments with >= 1 trained token)."""
    tok, seq = np.zeros(len(tb.TASKS)), np.zeros(len(tb.TASKS))
    for b in range(batch.batch_size):
        tid = int(batch.task_id[b])
        if tid < 0:
            continue
        for s in np.unique(batch.segment_ids[b]):
            n = int(((batch.segment_ids[b] == s) & (batch.loss_mask[b] > 0)).sum()) if s else 0
            tok[tid] += n
            seq[tid] += n > 0
    return tok, seq


def _check_objective(loss, per_term_lib, g, ref, what):
    total, per_term, (g_lo, g_hi, g_scale), abs_total, ties = ref
    assert_close(loss, total, abs_total, f"total {what}")
    for name, (value, abs_value) in per_term.items():
        assert_close(per_term_lib[f"loss/{name}"], value, abs_value, f"loss/{name} {what}")
    assert_close(per_term_lib["loss/total"], total, abs_total, f"loss/total {what}")
    ok = ~ties  # smooth clip points: test_objective_gradient_at_smooth_clip_point
    assert_in_interval(g[ok], g_lo[ok], g_hi[ok], g_scale[ok], f"d objective / d logp {what}")


@pytest.mark.parametrize("i", range(3), ids=lambda i: f"{AGGREGATIONS[i]}+{AGGREGATIONS[(i + 1) % 3]}")
def test_objective_matches_reference_full_and_micro_batches(i):
    defs = term_defs(i)
    terms = lib_specs(defs)
    m = B // N_MICRO
    for seed in SEEDS:
        batch, lp = make_batch(seed, OBJECTIVE_RATIOS)
        ref = ref_objective(defs, lp, batch)
        what = f"({AGGREGATIONS[i]}, seed {seed})"

        counts = L.batch_counts(batch)
        tok, seq = ref_counts(batch)
        np.testing.assert_allclose(counts.tokens, tok, rtol=1e-6)
        np.testing.assert_allclose(counts.sequences, seq, rtol=1e-6)

        # Full batch, normalised by its own counts.
        loss, per_term, g = _lib_objective(lp, batch, terms, None)
        _check_objective(float(loss), {k: float(v) for k, v in per_term.items()}, np.asarray(g), ref,
                         "full " + what)
        assert np.all(np.asarray(g)[batch.loss_mask == 0] == 0.0)

        # Micro-batches of whole rows with the full batch's counts: losses and per-term metrics add up, and the
        # gradients of the micro-batches are the full-batch gradient's rows.
        acc_loss, acc_terms, grads = 0.0, {}, []
        for k in range(N_MICRO):
            rows = slice(k * m, (k + 1) * m)
            mb = jax.tree.map(lambda x: x[rows], batch)
            loss_k, terms_k, g_k = _lib_objective(lp[rows], mb, terms, counts)
            acc_loss += float(loss_k)
            for name, v in terms_k.items():
                acc_terms[name] = acc_terms.get(name, 0.0) + float(v)
            grads.append(np.asarray(g_k))
        _check_objective(acc_loss, acc_terms, np.concatenate(grads), ref, "micro-batched " + what)


def test_objective_gradient_at_smooth_clip_point():
    defs = term_defs(0)
    got, lo, hi, scale = [], [], [], []
    for seed in SEEDS:
        batch, lp = make_batch(seed, OBJECTIVE_RATIOS)
        _, _, (g_lo, g_hi, g_scale), _, ties = ref_objective(defs, lp, batch)
        _, _, g = _lib_objective(lp, batch, lib_specs(defs), None)
        for acc, v in zip((got, lo, hi, scale), (np.asarray(g), g_lo, g_hi, g_scale)):
            acc.append(v[ties])
    got, lo, hi, scale = (np.concatenate(v) for v in (got, lo, hi, scale))
    assert got.size >= 2  # these batches do hold such tokens; the comparison below is the one that fails
    assert_in_interval(got, lo, hi, scale, "objective at smooth clip points")


def test_kl_aggregated_as_policy_term_differs_from_token_mean_kl():
    """The convention matters on these batches: a token-mean KL under a sequence-mean policy term gives another
    loss than the joint (verl / TRL) aggregation, so the objective test above can tell the two apart."""
    defs = term_defs(1)  # seq_mean_token_mean policy terms
    batch, lp = make_batch(0, OBJECTIVE_RATIOS)
    joint = ref_objective(defs, lp, batch)[0]
    mixed = [dict(d, aggregation="token_mean") if d["kind"] == "kl" else d for d in defs]
    loss, _, _ = _lib_objective(lp, batch, lib_specs(mixed), None)
    assert not np.isclose(float(loss), joint, rtol=1e-3)


# ----------------------------------------------------------------------------------------------------------------
# 5. Advantage estimators, ragged groups


def structural_zeros(r, v):
    """Slots whose advantage must be exactly 0: invalid ones, and all of a group without signal."""
    out = ~v.copy()
    for q, idx, vals, signal in _signal_groups(r, v):
        if not signal:
            out[q] = True
    return out


def _signal_groups(r, v):
    for q in range(r.shape[0]):
        idx = np.flatnonzero(v[q])
        vals = r[q, idx].astype(np.float64)
        yield q, idx, vals, idx.size >= 2 and vals.max() > vals.min()


def ref_grpo(r, v, scale="group", eps=1e-6, ddof=1):
    """(r_i - group mean) / (std + eps) over the valid members; 0 for invalid slots, groups with < 2 valid
    members and groups whose valid rewards are all equal. scale: group std | batch std of all valid rewards |
    none (Dr. GRPO)."""
    out = np.zeros(r.shape)
    allv = r[v].astype(np.float64)
    bstd = np.sqrt(((allv - allv.mean()) ** 2).sum() / max(allv.size - ddof, 1)) if allv.size else 0.0
    for q, idx, vals, signal in _signal_groups(r, v):
        if not signal:
            continue
        dev = vals - vals.mean()
        if scale == "group":
            out[q, idx] = dev / (np.sqrt((dev**2).sum() / (vals.size - ddof)) + eps)
        elif scale == "batch":
            out[q, idx] = dev / (bstd + eps)
        else:
            out[q, idx] = dev
    return out


def ref_rloo(r, v):
    """r_i - mean of the other valid members of its group; 0 for groups with < 2 valid members."""
    out = np.zeros(r.shape)
    for q, idx, vals, _ in _signal_groups(r, v):
        if vals.size >= 2:
            out[q, idx] = vals - (vals.sum() - vals) / (vals.size - 1)
    return out


def ref_reinforce_pp(r, v, eps=1e-6, ddof=1):
    """Group-mean centring, then (c - mean) / (std + eps) over the slots of the groups that carry signal."""
    centred, use = np.zeros(r.shape), np.zeros(r.shape, bool)
    for q, idx, vals, signal in _signal_groups(r, v):
        if signal:
            centred[q, idx] = vals - vals.mean()
            use[q, idx] = True
    c = centred[use]
    if not c.size:
        return np.zeros(r.shape)
    std = np.sqrt(((c - c.mean()) ** 2).sum() / max(c.size - ddof, 1))
    return np.where(use, (centred - c.mean()) / (std + eps), 0.0)


REFERENCE_ESTIMATORS = {
    "grpo": ref_grpo,
    "dr_grpo": functools.partial(ref_grpo, scale="none"),
    "grpo_batch_std": functools.partial(ref_grpo, scale="batch"),
    "rloo": ref_rloo,
    "reinforce_pp": ref_reinforce_pp,
}


def make_rewards(seed, q=10, g=6):
    """Groups of every kind (binary, graded, continuous, tiny spread, all equal, singleton, empty) with junk in
    the invalid slots."""
    rng = np.random.default_rng(200 + seed)
    r = np.zeros((q, g))
    v = np.ones((q, g), bool)
    kinds = rng.permutation(["binary", "binary", "graded", "continuous", "continuous", "tiny", "equal",
                             "singleton", "empty", "two_equal"])
    for i, kind in enumerate(kinds):
        if kind == "binary":
            r[i] = rng.integers(0, 2, g)
            r[i, :2] = [0, 1]  # make sure it carries signal
        elif kind == "graded":
            r[i] = rng.choice([0.0, 0.5, 1.0], g)
        elif kind == "continuous":
            r[i] = rng.normal(0.0, 2.0, g)
        elif kind == "tiny":
            r[i] = 1e-3 * rng.normal(size=g)  # std ~ 1e-3: where eps placement shows
        elif kind == "equal":
            r[i] = rng.normal()
        elif kind == "singleton":
            r[i] = rng.normal(size=g)
            v[i] = False
            v[i, rng.integers(g)] = True
        elif kind == "empty":
            v[i] = False
        elif kind == "two_equal":
            r[i] = 0.3
            v[i] = False
            v[i, :2] = True
        if kind not in ("singleton", "empty", "two_equal"):
            v[i, rng.random(g) < 0.3] = False  # ragged: drop some slots
            v[i, :2] = True
    r = r.astype(np.float32)
    r[~v] = np.where(rng.random((~v).sum()) < 0.5, np.nan, 1e6)
    return r, v


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("ddof", [1, 0])
def test_grpo_matches_written_out_formula(scale, ddof):
    for seed in SEEDS:
        r, v = make_rewards(seed)
        for eps in (1e-6, 1e-4):  # the library's default, and TRL's
            got = np.asarray(adv.grpo(r, v, scale=scale, eps=eps, ddof=ddof))
            want = ref_grpo(r, v, scale=scale, eps=eps, ddof=ddof)
            assert_close(got, want, 0.0, f"grpo scale={scale} ddof={ddof} eps={eps} seed {seed}")
            assert np.all(got[structural_zeros(r, v)] == 0.0)  # invalid slots, zero-signal groups: exactly 0


def test_registered_estimators_match_written_out_formulas():
    missing = sorted(set(adv.ESTIMATORS) - set(REFERENCE_ESTIMATORS))
    assert not missing, f"estimators without a written-out reference here: {missing}; add one"
    for seed in SEEDS:
        r, v = make_rewards(seed)
        for name, ref_fn in REFERENCE_ESTIMATORS.items():
            got = np.asarray(adv.compute_advantages(name, r, v))
            want = ref_fn(r, v)
            assert_close(got, want, 0.0, f"{name} seed {seed}")
            assert np.all(got[structural_zeros(r, v)] == 0.0), name
            assert np.all(np.isfinite(got)), name
    # reinforce_pp's ddof option too
    r, v = make_rewards(0)
    assert_close(np.asarray(adv.reinforce_pp(r, v, ddof=0)), ref_reinforce_pp(r, v, ddof=0), 0.0, "rf++ ddof 0")
