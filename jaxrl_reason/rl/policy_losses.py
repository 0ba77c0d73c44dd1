"""Every policy loss verl registers (`verl/trainer/ppo/core_algos.py`, `@register_policy_loss`), as loss-term kinds.

Each is a per-token kernel registered with `losses.register_term_kind`, so it runs through the one `objective`
(its numerator / global-denominator accumulation and its aggregations) on the rows of any task, exactly like
"ppo_clip" (verl's "vanilla"). `policy_spec(name, tasks, **knobs)` builds a term of one; `POLICY_LOSSES` lists
them and `policy_loss_knobs(name)` gives each one's own knobs and defaults (the valid keys of
`method.policy_loss_kwargs`). docs/methods/losses.md writes out every formula and where ours differs from verl
and TRL.

Conventions shared by every kernel here (TokenBatch layout, see `rl/batch.py`):
  valid = mask != 0; on other slots the log-ratio and the advantage are zeroed before any exp, so garbage in
  masked slots can make neither a value nor a gradient NaN (the loss there is 0 and carries weight 0).
  log-ratio lr = logp - old_logp, clamped to +-LOG_RATIO_CLAMP (verl clamps at 20 in vanilla, sapo, cispo and
  dppo_*; gspo clamps only above, at 10; clip_cov, kl_cov and geo_mean do not clamp: ours does, so that one
  garbage-valued old log-prob cannot overflow; the reference tests stay inside the clamp).
  Sequence-level quantities (GSPO's ratio, GMPO's geometric mean) are taken per (row, segment), so packed rows
  (`rl.batch.pack_rows`) work; a row never straddles micro-batches, so they stay exact under accumulation.
  Clip-Cov and KL-Cov select tokens by a covariance over the tokens of the term in the batch they are given, as
  verl does per micro-batch: they are the two kinds whose value depends on how a step is split
  (`BATCH_COUPLED`).
"""
from __future__ import annotations

import inspect
from typing import Optional

import jax
import jax.numpy as jnp

from jaxrl_reason.rl.losses import (LOG_RATIO_CLAMP, TermSpec, ppo_clip_per_token, register_term_kind,
                                    segment_lengths, term_spec)

sg = jax.lax.stop_gradient


def _prep(logprobs, old_logprobs, advantages, mask, clamp_low=-LOG_RATIO_CLAMP, clamp_high=LOG_RATIO_CLAMP):
    valid = mask != 0
    lr = jnp.clip(jnp.where(valid, logprobs - old_logprobs, 0.0), clamp_low, clamp_high)
    adv = jnp.where(valid, advantages, 0.0)
    return valid, lr, adv


def _segment_mean(x, valid, segment_ids, eps=0.0):
    """Per token: the mean of x over the valid tokens of its (row, segment); x is zeroed off `valid` first."""
    v = valid.astype(jnp.float32)
    total = segment_lengths(jnp.where(valid, x, 0.0), segment_ids)
    n = segment_lengths(v, segment_ids)
    return total / (jnp.maximum(n, 1.0) + eps)


def _pick(a, b):
    """max(a, b) by an explicit branch (the ppo_clip tie rule: at a tie the unclipped branch b keeps its gradient)."""
    return jnp.where(a > b, a, b)


def _stats(**kw):
    return {k: sg(v.astype(jnp.float32)) for k, v in kw.items()}


def _valid_count(valid):
    return jnp.sum(valid.astype(jnp.float32))


def _masked_mean(x, valid):
    return jnp.sum(jnp.where(valid, x, 0.0)) / jnp.maximum(_valid_count(valid), 1.0)


def _top_k_mask(score, candidates, k):
    """Bool mask of the (at most) k candidates with the largest score; ties by position. k may be traced."""
    flat = jnp.where(candidates, score, -jnp.inf).reshape(-1)
    order = jnp.argsort(-flat, stable=True)
    rank = jnp.zeros_like(order).at[order].set(jnp.arange(flat.shape[0]))
    return (rank.reshape(score.shape) < k) & candidates


# ----------------------------------------------------------------------------------------------------------------
# Kernels: (logprobs [B, T], batch, mask [B, T], **knobs) -> (per-token loss [B, T], {stat: [B, T]})


def gspo_kernel(logprobs, batch, mask, *, eps_low: float = 3e-4, eps_high: float = 4e-4):
    """GSPO (Zheng et al. 2025), in verl's GSPO-token form: every token carries the sequence ratio
    s = exp(mean_t lr) as its value and its own log-prob's gradient, s_t = sg(s) * pi / sg(pi); then PPO's clip on
    s_t with GSPO's small clip range. With one advantage per sequence this is GSPO exactly (the gradient is the
    sequence's); with per-token advantages it is GSPO-token."""
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    seq_lr = _segment_mean(lr, valid, batch.segment_ids)
    lp = jnp.where(valid, logprobs, 0.0)
    log_s = jnp.minimum(lp - sg(lp) + sg(seq_lr), 10.0)  # verl: clamp above only, at 10
    s = jnp.exp(jnp.where(valid, log_s, 0.0))
    unclipped = -adv * s
    clipped = -adv * jnp.clip(s, 1.0 - eps_low, 1.0 + eps_high)
    loss = _pick(clipped, unclipped)
    return loss, _stats(clip_frac=clipped > unclipped, seq_ratio_mean=s)


def sapo_kernel(logprobs, batch, mask, *, tau_pos: float = 1.0, tau_neg: float = 1.05):
    """SAPO (Gao et al. 2025): a soft gate instead of the hard clip, f(r) = sigmoid(tau (r - 1)) * 4 / tau, with
    tau_pos for A > 0 and tau_neg otherwise; loss = -f(r) A. Its gradient at r = 1 equals the policy gradient and
    decays smoothly (not to zero at once) as r leaves 1."""
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"sapo: tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    r = jnp.exp(lr)
    tau = jnp.where(adv > 0, tau_pos, tau_neg)
    gate = jax.nn.sigmoid(tau * (r - 1.0)) * (4.0 / tau)
    return -gate * adv, _stats(gate_mean=gate, ratio_mean=r)


def gpg_kernel(logprobs, batch, mask):
    """GPG (Chu et al. 2025): plain policy gradient, loss = -A logp (no ratio, no clip)."""
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    # The ratio is only reported (how far off-policy the update has gone); the loss never reads it.
    return -adv * jnp.where(valid, logprobs, 0.0), _stats(ratio_mean=jnp.exp(lr))


def clip_cov_kernel(logprobs, batch, mask, *, eps_low: float = 0.2, eps_high: float = 0.2,
                    clip_cov_ratio: float = 2e-4, clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0):
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for reasoning LMs"): PPO-clip, except that a few
    tokens whose centred covariance cov = (A - mean A)(logp - mean logp) lies in (lb, ub) -- and that the PPO clip
    did not already remove -- lose their gradient (loss * 0). k = max(1, floor(clip_cov_ratio * n)) of them,
    n = the term's tokens in this batch. verl draws the k at random among the candidates; ours takes the k with
    the largest covariance (a pure function of the batch: no key in the objective)."""
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov: clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    r = jnp.exp(lr)
    unclipped = -adv * r
    clipped = -adv * jnp.clip(r, 1.0 - eps_low, 1.0 + eps_high)
    clip_by_origin = (clipped > unclipped) & valid
    lp = sg(jnp.where(valid, logprobs, 0.0))
    cov = (adv - _masked_mean(adv, valid)) * (lp - _masked_mean(lp, valid))
    candidates = valid & ~clip_by_origin & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    k = jnp.maximum(jnp.floor(clip_cov_ratio * _valid_count(valid)), 1.0)
    selected = _top_k_mask(cov, candidates, k)
    loss = jnp.where(selected, 0.0, _pick(clipped, unclipped))
    return loss, _stats(cov_clip_frac=selected, clip_frac=clip_by_origin, ratio_mean=r)


def kl_cov_kernel(logprobs, batch, mask, *, kl_cov_ratio: float = 2e-4, ppo_kl_coef: float = 0.1):
    """KL-Cov (Cui et al. 2025): the unclipped surrogate -A r on every token, plus ppo_kl_coef * |lr| on the
    k = max(1, floor(kl_cov_ratio * n)) tokens with the largest centred covariance (A - mean A)(logp - mean logp)."""
    if kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov: kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    r = jnp.exp(lr)
    lp = sg(jnp.where(valid, logprobs, 0.0))
    cov = (adv - _masked_mean(adv, valid)) * (lp - _masked_mean(lp, valid))
    k = jnp.maximum(jnp.floor(kl_cov_ratio * _valid_count(valid)), 1.0)
    selected = _top_k_mask(cov, valid, k)
    loss = -adv * r + jnp.where(selected, ppo_kl_coef * jnp.abs(lr), 0.0)
    return loss, _stats(kl_cov_frac=selected, ratio_mean=r)


def geo_mean_kernel(logprobs, batch, mask, *, eps_low: float = 0.4, eps_high: float = 0.4):
    """GMPO (Zhao et al. 2025): the geometric mean of the token ratios, clipped token-wise in log space:
    m_t = sign(A) min(sign(A) lr_t, sign(A) clip(lr_t, -eps_low, eps_high)), rho = exp(mean_t m_t) per sequence,
    sequence loss -mean_t(A_t) rho. Every token of a sequence carries the sequence's loss, so the
    seq_mean_token_mean aggregation gives exactly the per-sequence mean verl takes."""
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    sgn = jnp.sign(adv)
    lrc = jnp.clip(lr, -eps_low, eps_high)
    m = sgn * jnp.minimum(sgn * lr, sgn * lrc)
    rho = jnp.exp(_segment_mean(m, valid, batch.segment_ids, eps=1e-8))
    seq_adv = _segment_mean(adv, valid, batch.segment_ids, eps=1e-8)
    loss = jnp.where(valid, -seq_adv * rho, 0.0)
    clipped = (lr != lrc) & valid
    return loss, _stats(clip_frac_high=clipped & (adv > 0), clip_frac_low=clipped & (adv < 0), seq_ratio_mean=rho)


def cispo_kernel(logprobs, batch, mask, *, eps_low: float = 1.0, eps_high: float = 0.2):
    """CISPO (MiniMax-M1, Chen et al. 2025): loss = -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp. The clip acts
    on a stop-gradient weight, so every token keeps its gradient A * weight * grad logp -- clipped ones too.
    eps_low = 1 (weight >= 0): no lower bound, as the paper ran it."""
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    r = jnp.exp(lr)
    w = sg(jnp.clip(r, 1.0 - eps_low, 1.0 + eps_high))
    loss = -w * adv * jnp.where(valid, logprobs, 0.0)
    return loss, _stats(clip_frac=(w != r) & valid, ratio_mean=r)


def _dppo(logprobs, batch, mask, divergence, clip_ratio_c):
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    r = jnp.exp(lr)
    w = sg(jnp.minimum(r, clip_ratio_c))  # truncated IS instead of PPO's dual clip
    keep = sg(divergence(valid, adv))
    loss = -adv * w * jnp.where(valid, logprobs, 0.0) * keep.astype(jnp.float32)
    return loss, _stats(clip_frac=~keep & valid, tis_frac=(r > clip_ratio_c) & keep & valid, ratio_mean=r)


def _probs(logprobs, old_logprobs, valid):
    # Masked slots get p = p_old = 1/2: finite in every formula below, and their loss is zeroed anyway.
    lp = jnp.where(valid, logprobs, jnp.log(0.5))
    olp = jnp.where(valid, old_logprobs, jnp.log(0.5))
    return lp, olp, jnp.exp(lp), jnp.exp(olp)


def dppo_tv_kernel(logprobs, batch, mask, *, eps_low: float = 0.2, eps_high: float = 0.2,
                   clip_ratio_c: float = 20.0):
    """DPPO-Binary-TV (verl `dppo_tv`, arXiv 2602.04879): loss = -A sg(min(r, c)) logp on the tokens inside the
    trust region, p - p_old <= eps_high (A > 0) or p - p_old >= -eps_low (A <= 0), and 0 outside: the trust region
    is a total-variation bound on the token's probability, not a bound on the ratio."""
    def keep(valid, adv):
        _, _, p, p_old = _probs(logprobs, batch.old_logprobs, valid)
        return jnp.where(adv > 0, (p - p_old) <= eps_high, (p - p_old) >= -eps_low)
    return _dppo(logprobs, batch, mask, keep, clip_ratio_c)


def dppo_kl_kernel(logprobs, batch, mask, *, eps_low: float = 0.2, eps_high: float = 0.2,
                   clip_ratio_c: float = 20.0):
    """DPPO-Binary-KL (verl `dppo_kl`): as dppo_tv with the binary KL
    D = p_old log(p_old / p) + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8)) as the trust region: a token is
    kept when D <= eps_high or p <= p_old (A > 0), D <= eps_low or p >= p_old (A <= 0)."""
    def keep(valid, adv):
        lp, olp, p, p_old = _probs(logprobs, batch.old_logprobs, valid)
        d = p_old * (olp - lp) + (1.0 - p_old) * jnp.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
        return jnp.where(adv > 0, (d <= eps_high) | (p <= p_old), (d <= eps_low) | (p >= p_old))
    return _dppo(logprobs, batch, mask, keep, clip_ratio_c)


def dro_kernel(logprobs, batch, mask, *, dro_beta: float = 0.1):
    """DRO (Richemond et al. 2024, as SkyRL and Twinkle register it under verl's "dro" name): a policy gradient
    with a quadratic trust region, loss = -(A logp - dro_beta / 2 (logp - old_logp)^2)."""
    if dro_beta <= 0:
        raise ValueError(f"dro: dro_beta must be > 0, got {dro_beta}")
    valid, lr, adv = _prep(logprobs, batch.old_logprobs, batch.advantages, mask)
    loss = -(adv * jnp.where(valid, logprobs, 0.0) - 0.5 * dro_beta * lr**2)
    return loss, _stats(log_ratio_sq=lr**2)


# ----------------------------------------------------------------------------------------------------------------
# Registry

# name -> kernel. "ppo_clip" is verl's "vanilla" (PPO clip, clip-higher, dual clip), registered in `rl.losses`;
# its knobs are PolicyLossConfig's own eps_low / eps_high / dual_clip.
KERNELS = {
    "gspo": gspo_kernel,
    "sapo": sapo_kernel,
    "gpg": gpg_kernel,
    "clip_cov": clip_cov_kernel,
    "kl_cov": kl_cov_kernel,
    "geo_mean": geo_mean_kernel,
    "cispo": cispo_kernel,
    "dppo_tv": dppo_tv_kernel,
    "dppo_kl": dppo_kl_kernel,
    "dro": dro_kernel,
}
for _name, _kernel in KERNELS.items():
    register_term_kind(_name, _kernel)

POLICY_LOSSES = ("ppo_clip",) + tuple(KERNELS)
VERL_NAMES = {"vanilla": "ppo_clip"}  # verl's name -> ours, where they differ
BATCH_COUPLED = ("clip_cov", "kl_cov")  # their token selection reads the whole (micro-)batch they are given


def policy_loss_knobs(name: str) -> dict:
    """{knob: default} of policy loss `name`'s own knobs (its kernel's keyword-only parameters); ppo_clip's are
    PolicyLossConfig's eps_low / eps_high / dual_clip, so it has none here."""
    name = VERL_NAMES.get(name, name)
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; choose one of {POLICY_LOSSES}")
    if name == "ppo_clip":
        return {}
    params = inspect.signature(KERNELS[name]).parameters.values()
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}


def policy_spec(policy_loss: str, tasks, *, name: str = "pg", weight: float = 1.0, aggregation: str = "token_mean",
                max_len: Optional[int] = None, **knobs) -> TermSpec:
    """A term of policy loss `policy_loss` over `tasks`' rows; `knobs` are its own (policy_loss_knobs), defaults
    filled in; a knob it does not have is refused, naming the valid ones."""
    kind = VERL_NAMES.get(policy_loss, policy_loss)
    if kind == "ppo_clip":
        from jaxrl_reason.rl.losses import pg_spec
        return pg_spec(tasks, name=name, weight=weight, aggregation=aggregation, max_len=max_len, **knobs)
    valid = policy_loss_knobs(kind)
    unknown = sorted(set(knobs) - set(valid))
    if unknown:
        raise ValueError(f"policy loss {kind!r} has no knob(s) {unknown}; its knobs are {sorted(valid)}")
    opts = {k: float(knobs.get(k, v)) for k, v in valid.items()}
    return term_spec(kind, tasks, name=name, weight=weight, aggregation=aggregation, max_len=max_len, **opts)


__all__ = ["BATCH_COUPLED", "KERNELS", "POLICY_LOSSES", "policy_loss_knobs", "policy_spec", "ppo_clip_per_token"]
