"""The fused, jitted update: one forward/backward per micro-batch over a packed TokenBatch, gradients summed
with exact global normalisers, one optimizer step, and a refusal to apply non-finite updates."""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxrl_reason.rl.batch import TokenBatch, stack_micro_batches
from jaxrl_reason.rl.losses import (TermSpec, align_to_targets, batch_counts, counts_metrics, finite_flags,
                                    next_token_targets, objective, safe_divide, token_logprobs_from_hidden,
                                    tree_is_finite)


class UpdateOutput(NamedTuple):
    params: object
    opt_state: object
    metrics: dict
    finite: dict  # {term: bool}, plus "grads"; the update was applied only if all are True


def model_logprobs(graphdef, params, batch: TokenBatch, *, chunk_size: Optional[int] = None):
    """Per-token log-probs and entropy in TokenBatch layout, from final hidden states, never materialising more
    than a `chunk_size` slice of the [B, T, V] logits."""
    model = nnx.merge(graphdef, params)
    h, _ = model.hidden_states(batch.tokens, batch.positions, batch.segment_ids)
    if model.lm_head is None:
        w = model.embed_tokens.weight[...].astype(h.dtype).T
    else:
        w = model.lm_head.kernel[...].astype(h.dtype)
    lp, ent = token_logprobs_from_hidden(h, w, next_token_targets(batch.tokens), chunk_size=chunk_size,
                                         with_entropy=True)
    return align_to_targets(lp), align_to_targets(ent)


def _loss_fn(params, graphdef, mb: TokenBatch, counts, terms, chunk_size):
    lp, ent = model_logprobs(graphdef, params, mb, chunk_size=chunk_size)
    loss, metrics = objective(lp, mb, terms, counts=counts, entropy=ent)
    # Sampler/trainer mismatch: |log pi_train - log pi_sampler| on sampled tokens (rows with old log-probs).
    sampled = mb.loss_mask * (mb.old_logprobs != 0)
    gap = jnp.abs(jax.lax.stop_gradient(lp) - mb.old_logprobs) * sampled
    metrics["logprob_gap/sum"] = gap.sum()
    metrics["logprob_gap/max"] = gap.max()
    metrics["logprob_gap/tokens"] = sampled.sum()
    return loss, metrics


def make_update(graphdef, optimizer: optax.GradientTransformation, terms: tuple[TermSpec, ...], *,
                micro_batches: int = 1, logprob_chunk: Optional[int] = None) -> Callable:
    """Returns jitted `update(params, opt_state, batch) -> UpdateOutput`. `batch` rows must divide into
    `micro_batches` (see `rl.batch.pad_rows_to`). params and opt_state are donated."""

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def update(params, opt_state, batch: TokenBatch) -> UpdateOutput:
        counts = batch_counts(batch)
        stacked = stack_micro_batches(batch, micro_batches)
        grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
        first = jax.tree.map(lambda x: x[0], stacked)
        _, metric_shapes = jax.eval_shape(lambda: _loss_fn(params, graphdef, first, counts, terms, logprob_chunk))
        zeros = (jax.tree.map(jnp.zeros_like, params),
                 jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes))

        def body(acc, mb):
            (_, m), g = grad_fn(params, graphdef, mb, counts, terms, logprob_chunk)
            m = dict(m)
            gmax = m.pop("logprob_gap/max")
            acc_g, acc_m = acc
            acc_m = dict(acc_m)
            prev_max = acc_m.pop("logprob_gap/max")
            acc_m = jax.tree.map(jnp.add, acc_m, m)
            acc_m["logprob_gap/max"] = jnp.maximum(prev_max, gmax)
            return (jax.tree.map(jnp.add, acc_g, g), acc_m), None

        (grads, metrics), _ = jax.lax.scan(body, zeros, stacked)
        metrics = dict(metrics)
        gap_tokens = metrics.pop("logprob_gap/tokens")
        metrics["logprob_gap/mean"] = safe_divide(metrics.pop("logprob_gap/sum"), gap_tokens)
        flags = finite_flags(metrics)
        flags["grads"] = tree_is_finite(grads)
        ok = jnp.all(jnp.stack(list(flags.values())))
        updates, new_opt = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)
        metrics["grad_norm"] = optax.global_norm(grads)
        metrics["update_norm"] = optax.global_norm(updates)
        metrics.update(counts_metrics(counts))
        return UpdateOutput(keep(new_params, params), keep(new_opt, opt_state), metrics, flags)

    return update


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk_size"))
def reference_logprobs(graphdef, params, batch: TokenBatch, chunk_size: Optional[int] = None):
    """log-probs of the batch's tokens under frozen `params` (TokenBatch layout), for the KL term."""
    lp, _ = model_logprobs(graphdef, params, batch, chunk_size=chunk_size)
    return lp
