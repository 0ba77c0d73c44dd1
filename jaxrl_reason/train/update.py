"""The fused, jitted update: one forward/backward per micro-batch over a packed TokenBatch, gradients summed
with exact global normalisers, one optimizer step, and a refusal to apply non-finite updates."""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxrl_reason.parallel.mesh import batch_shards, resolve_mesh
from jaxrl_reason.parallel.rules import (BATCH, DEFAULT_RULES, Rules, as_sharded, batch_sharding, init_opt_state,
                                         param_shardings, tree_shardings)
from jaxrl_reason.rl.batch import TokenBatch, assert_token_batch_shapes, stack_micro_batches
from jaxrl_reason.rl.gae import explained_variance
from jaxrl_reason.rl.losses import (TermSpec, batch_counts, counts_metrics, finite_flags, needs_values, objective,
                                    safe_divide, scoring_temperatures, tree_is_finite, value_task_ids)
from jaxrl_reason.rl.prefix import SharedPrefixBatch
from jaxrl_reason.rl.prefix import stack_micro_batches as stack_shared_micro_batches
from jaxrl_reason.rl.scoring import model_logprobs


class UpdateOutput(NamedTuple):
    params: object
    opt_state: object
    metrics: dict
    finite: dict  # {term: bool}, plus "grads" and "scored_positions"; the update was applied only if all are True


# The value head is one small matrix: replicated wherever the policy lives. Appended to any rules given, so a
# user rule for it still wins, and harmless for a model without one.
VALUE_HEAD_RULES: Rules = ((r"value_head/(kernel|bias)", ()),)


def split_trainable(params, trainable=None):
    """(the leaves an update trains, the frozen rest) of `params`; trainable None: all of them, nothing frozen.
    trainable is an nnx filter (a LoRA run's `models.lora.TRAINABLE`)."""
    if trainable is None:
        return params, None
    return nnx.split_state(params, trainable, ...)


def join_trainable(train, frozen):
    return train if frozen is None else nnx.merge_state(train, frozen)


def _loss_fn(params, graphdef, mb, counts, terms, chunk_size, scored, row_groups, temperatures, value_tasks=None,
             dropout_key=None):
    """value_tasks: None when no term reads values (the plain scoring path, unchanged), else the static ids of
    the value rows (`rl.losses.value_task_ids`). dropout_key: the LoRA adapters' dropout in this forward."""
    out = model_logprobs(graphdef, params, mb, chunk_size=chunk_size, scored=scored, row_groups=row_groups,
                         temperature=temperatures, value_tasks=value_tasks, dropout_key=dropout_key)
    lp, ent, fits = out[:3]
    values = out[3] if value_tasks is not None else None
    mb = mb.rows if isinstance(mb, SharedPrefixBatch) else mb
    loss, metrics = objective(lp, mb, terms, counts=counts, entropy=ent, values=values)
    # Sampler/trainer mismatch: |log pi_train - log pi_sampler| on sampled tokens (rows with old log-probs).
    sampled = mb.loss_mask * (mb.old_logprobs != 0)
    if value_tasks:  # value rows hold V_old where sampled rows hold log pi_old
        sampled = sampled * ~jnp.isin(mb.task_id, jnp.asarray(value_tasks, jnp.int32))[:, None]
    gap = jnp.abs(jax.lax.stop_gradient(lp) - mb.old_logprobs) * sampled
    metrics["logprob_gap/sum"] = gap.sum()
    metrics["logprob_gap/max"] = gap.max()
    metrics["logprob_gap/tokens"] = sampled.sum()
    metrics["scored/overflow"] = jnp.logical_not(fits).astype(jnp.float32)
    return loss, metrics


def training_compiler_options(matmuls: str = "auto", devices: int = 1) -> dict:
    """XLA compile options for a training forward/backward over `devices` devices.

    matmuls: "eigen" compiles XLA:CPU's matmuls to its own dot kernels instead of YNNPACK fusions, "ynn" keeps
    XLA's default, "auto" is "eigen" on one CPU device and XLA's default elsewhere (the "eigen" choice was measured
    on one device only). On the 2-core benchmark machine the update of `experiments/bench/train_step.py` ran ~15%
    faster with "eigen" (`python experiments/bench/profile_update.py --matmuls eigen|ynn`), while the sampler's
    decode-sized matmuls are faster with YNNPACK: so the option is per jitted function, not a process-wide
    XLA_FLAGS."""
    if matmuls not in ("auto", "eigen", "ynn"):
        raise ValueError(f"matmuls must be 'auto', 'eigen' or 'ynn', got {matmuls!r}")
    if matmuls == "ynn" or (matmuls == "auto" and (jax.default_backend() != "cpu" or devices > 1)):
        return {}
    return {"xla_cpu_experimental_ynn_fusion_type": ""}


def make_update(graphdef, optimizer: optax.GradientTransformation, terms: tuple[TermSpec, ...], *,
                micro_batches: int = 1, logprob_chunk: Optional[int] = None, row_groups: int = 1,
                matmuls: str = "auto", temperature: float = 1.0, trainable=None) -> Callable:
    """Returns jitted `update(params, opt_state, batch, scored=None, key=None) -> UpdateOutput`. `batch` rows must divide
    into `micro_batches` (see `rl.batch.pad_rows_to`). params and opt_state are donated.

    scored (static): None computes the LM head at every position; `rl.batch.scored_size(batch, micro_batches,
    row_groups)` computes it only where a loss reads it (same result, less work when rows train on a fraction of
    their tokens). An undersized `scored` is refused like a non-finite loss (flag "scored_positions").
    row_groups: contiguous row blocks per micro-batch that gather their scored positions separately; on a mesh
    the number of batch shards, so no gather crosses devices. matmuls: see `training_compiler_options`.
    temperature: the rollouts' sampling temperature. Rows of sampled-data terms (PPO clip, KL) are scored under
    the tempered policy log-softmax(logits / T), the one the sampler reports as pi_old, so the first epoch's
    ratio is 1 and the gradient is that of the policy that generated the data; supervised rows at T = 1
    (`rl.losses.scoring_temperatures`).
    trainable: an nnx filter of the params the update trains (`split_trainable`; a LoRA run's adapters): only
    they are differentiated and hold optimizer state (`opt_state` is the optimizer's state of that part), the
    rest pass through unchanged. None trains all.
    key: the step's key for a LoRA policy's adapter dropout (`lora.dropout`; micro-batch i drops with
    fold_in(key, i)); None, or a policy without dropout, runs the forward without it."""
    temperatures = scoring_temperatures(terms, temperature)
    value_tasks = value_task_ids(terms) if needs_values(terms) else None

    @functools.partial(jax.jit, donate_argnums=(0, 1), static_argnames=("scored",),
                       compiler_options=training_compiler_options(matmuls))
    def update(params, opt_state, batch: TokenBatch | SharedPrefixBatch, scored: Optional[int] = None,
               key=None) -> UpdateOutput:
        assert_token_batch_shapes(batch.rows if isinstance(batch, SharedPrefixBatch) else batch)
        if isinstance(batch, SharedPrefixBatch):
            counts, stacked = batch_counts(batch.rows), stack_shared_micro_batches(batch, micro_batches)
        else:
            counts, stacked = batch_counts(batch), stack_micro_batches(batch, micro_batches, row_groups)
        all_params = params
        params, frozen = split_trainable(all_params, trainable)
        grad_fn = jax.value_and_grad(lambda p, *a: _loss_fn(join_trainable(p, frozen), *a), has_aux=True)
        first = jax.tree.map(lambda x: x[0], stacked)
        _, metric_shapes = jax.eval_shape(
            lambda: _loss_fn(all_params, graphdef, first, counts, terms, logprob_chunk, scored, row_groups,
                             temperatures, value_tasks))
        zeros = (jax.tree.map(jnp.zeros_like, params),
                 jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes))

        def body(acc, xs):  # xs: the micro-batch, or (its index, it) when dropout needs a key per micro-batch
            mb, mb_key = (xs, None) if key is None else (xs[1], jax.random.fold_in(key, xs[0]))
            (_, m), g = grad_fn(params, graphdef, mb, counts, terms, logprob_chunk, scored, row_groups,
                                temperatures, value_tasks, mb_key)
            m = dict(m)
            gmax = m.pop("logprob_gap/max")
            acc_g, acc_m = acc
            acc_m = dict(acc_m)
            prev_max = acc_m.pop("logprob_gap/max")
            acc_m = jax.tree.map(jnp.add, acc_m, m)
            acc_m["logprob_gap/max"] = jnp.maximum(prev_max, gmax)
            return (jax.tree.map(jnp.add, acc_g, g), acc_m), None

        xs = stacked if key is None else (jnp.arange(jax.tree.leaves(stacked)[0].shape[0]), stacked)
        (grads, metrics), _ = jax.lax.scan(body, zeros, xs)
        metrics = dict(metrics) if value_tasks is None else explained_variance(metrics)
        gap_tokens = metrics.pop("logprob_gap/tokens")
        metrics["logprob_gap/mean"] = safe_divide(metrics.pop("logprob_gap/sum"), gap_tokens)
        overflow = metrics.pop("scored/overflow")
        flags = finite_flags(metrics)
        flags["grads"] = tree_is_finite(grads)
        flags["scored_positions"] = overflow == 0
        ok = jnp.all(jnp.stack(list(flags.values())))
        updates, new_opt = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)
        metrics["grad_norm"] = optax.global_norm(grads)
        metrics["update_norm"] = optax.global_norm(updates)
        metrics.update(counts_metrics(counts))
        return UpdateOutput(join_trainable(keep(new_params, params), frozen), keep(new_opt, opt_state), metrics,
                            flags)

    return update


# ----------------------------------------------------------------------------------------------------------------
# The fused update on a mesh


def make_sharded_update(graphdef, optimizer, terms, mesh: Mesh, params, opt_state, batch_example=None, *,
                        rules: Rules = DEFAULT_RULES, **update_kw):
    """`train.update.make_update` compiled for the mesh: params and optimizer state stay in their rule
    shardings across steps (inputs and outputs pinned, both donated), the batch is split by rows, and the
    metrics come back replicated. XLA's SPMD partitioner inserts the gathers and reduce-scatters. One device is
    the one-device mesh (`parallel.mesh.one_device_mesh`), not a separate path.

    batch_example: a batch (or ShapeDtypeStructs) to check row divisibility up front; None accepts any row
    count that divides data x fsdp (bucketed batches change shape between steps), checked by jit at call time.
    A SharedPrefixBatch is accepted when the rows are not split (data x fsdp = 1): its prefixes and rows have
    different row counts, and a prefix must sit on the device of the rows that read it.
    Returns `(update, param_shardings, opt_shardings, batch_shardings)`.
    """
    update_kw.setdefault("row_groups", batch_shards(mesh))
    # Compile options belong to the outermost jit (JAX refuses them on a nested one).
    matmuls = update_kw.pop("matmuls", "auto")
    inner = make_update(graphdef, optimizer, terms, matmuls="ynn", **update_kw)
    ps = tree_shardings(params, mesh, rules)
    os_ = tree_shardings(opt_state, mesh, rules)
    # A single sharding is a pytree prefix for the whole batch: every field split by rows, whatever its rank.
    bs = NamedSharding(mesh, P(BATCH)) if batch_example is None else batch_sharding(batch_example, mesh)
    rep = NamedSharding(mesh, P())
    # `scored` is static and positional: jit takes no keyword arguments once in_shardings is given.
    jitted = jax.jit(lambda p, o, b, scored, key: inner(p, o, b, scored=scored, key=key),
                     in_shardings=(ps, os_, bs, rep), out_shardings=UpdateOutput(ps, os_, rep, rep),
                     donate_argnums=(0, 1), static_argnums=(3,),
                     compiler_options=training_compiler_options(matmuls, mesh.size))

    def update(params, opt_state, batch, scored=None, key=None):
        if isinstance(batch, SharedPrefixBatch) and batch_shards(mesh) > 1:
            raise ValueError(f"a SharedPrefixBatch cannot be split over {batch_shards(mesh)} batch shards; pass the "
                             "plain TokenBatch (the trainer's share_prompts applies on unsplit rows only)")
        with jax.set_mesh(mesh):  # traced under the mesh: the model pins its activations' rows to it
            return jitted(params, opt_state, batch, scored, key)

    def lower(params, opt_state, batch, scored=None, key=None):
        with jax.set_mesh(mesh):
            return jitted.lower(params, opt_state, batch, scored, key)

    update.lower = lower
    return update, ps, os_, bs


class Training(NamedTuple):
    """What a training loop starts from on its mesh: the update and the params / optimizer state placed for it."""

    update: Callable  # update(params, opt_state, batch, scored=None, key=None) -> UpdateOutput (params, opt_state
    # donated; key: the LoRA adapters' dropout)
    graphdef: object
    params: object
    opt_state: object
    mesh: Mesh


def start_training(model, optimizer, terms, mesh: Optional[Mesh] = None, *, params=None,
                   rules: Rules = DEFAULT_RULES, trainable=None, **update_kw) -> Training:
    """The one set-up of every training loop (RL trainer, SFT, verification warm-up): the model's params (or
    `params`, an nnx.State of its structure) laid out by `rules` on `mesh` (None: the one-device mesh; a leaf
    already in place is not copied), the optimizer state initialised in its shardings, and the update compiled for
    that mesh. trainable: `make_update`'s (the optimizer state covers that part only). update_kw: `make_update`'s."""
    mesh = resolve_mesh(mesh)
    rules = tuple(rules) + VALUE_HEAD_RULES
    graphdef, own = nnx.split(model)
    params = own if params is None else params
    params = as_sharded(params, param_shardings(model, mesh, rules))
    opt_state = init_opt_state(optimizer, split_trainable(params, trainable)[0], mesh, rules)
    update, *_ = make_sharded_update(graphdef, optimizer, terms, mesh, params, opt_state, rules=rules,
                                     trainable=trainable, **update_kw)
    return Training(update, graphdef, params, opt_state, mesh)
