"""The RL core: the TokenBatch every task trains from, advantage estimators, loss terms and the objective, token
scoring, truncated importance sampling and DAPO's overlong handling.

Extension points: an advantage estimator is an entry of `ESTIMATORS` (a pure function of [Q, G] rewards); a loss
is a kind registered once with `register_term_kind` and used through `term_spec` (docs/extending.md)."""
from jaxrl_reason.rl.advantages import ESTIMATORS, compute_advantages, group_metrics, zero_signal_groups
from jaxrl_reason.rl.gae import GAEOutput, WHITENING, clipped_value_loss, gae, whiten
from jaxrl_reason.rl.batch import TASKS, TokenBatch, build_token_batch, concat_batches, pad_rows_to, register_task
from jaxrl_reason.rl.importance import truncated_is_weights
from jaxrl_reason.rl.losses import (TERM_KINDS, TermKind, TermSpec, kl_spec, needs_reference, objective, pg_spec,
                                    register_term_kind, sft_spec, term_spec)
from jaxrl_reason.rl.overlong import overlong_penalty
from jaxrl_reason.rl.policy_losses import POLICY_LOSSES, policy_loss_knobs, policy_spec  # registers verl's losses
from jaxrl_reason.rl.scoring import completion_logprobs, model_logprobs, next_token_logprobs, reference_logprobs

__all__ = [
    "ESTIMATORS", "GAEOutput", "TASKS", "TERM_KINDS", "TermKind", "TermSpec", "TokenBatch", "WHITENING",
    "build_token_batch", "clipped_value_loss", "gae", "whiten",
    "completion_logprobs", "compute_advantages", "concat_batches", "group_metrics", "kl_spec", "model_logprobs",
    "needs_reference", "next_token_logprobs", "objective", "overlong_penalty", "pad_rows_to", "pg_spec",
    "POLICY_LOSSES", "policy_loss_knobs", "policy_spec",
    "reference_logprobs", "register_task", "register_term_kind", "sft_spec", "term_spec", "truncated_is_weights",
    "zero_signal_groups",
]
