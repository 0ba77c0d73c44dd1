"""Test-time compute: the RL^V verifier score, answer-selection strategies, and their unbiased estimators.

  verifier     score(model, tokenizer, questions, solutions) = P("Yes" | verify prompt); verify_rows for training
  test_time    majority_vote, best_of_n, weighted_vote, select_length_by_confidence, budget_forcing, evaluate
  estimators   pass_at_k, best_of_k, majority_at_k, weighted_at_k
  refine       self_refine: CURE's test-time loop (solve, critique, re-solve from the hint) for up to T rounds
  diagnostics  verifier_quality (pooled and within-question AUROC), vote_headroom, best_of_n_chance
  strategies   evaluate_refinement, length_selection, forced_budgets, majority_at_tokens: the strategies that
               spend tokens differently, as rows of {acc, tokens} over a dataset (experiments/evaluate.py flags)
"""
from jaxrl_reason.inference.estimators import (SubsetEstimate, best_of_k, majority_at_k, pass_at_k,
                                               power_of_two_ks, weighted_at_k)
from jaxrl_reason.inference.refine import RefineResult, make_generate, self_refine
from jaxrl_reason.inference.strategies import (evaluate_refinement, forced_budgets, length_selection,
                                                majority_at_tokens, refinement_report)
from jaxrl_reason.inference.test_time import (CONCLUSION_MARKER, THINK_CONCLUSION_MARKER, BudgetRun, Choice,
                                              ForcedOutput, LengthSelection, accuracy_curves, best_of_n,
                                              budget_forcing, evaluate, majority_vote, select_length_by_confidence,
                                              truncate_to_last_sentence, weighted_vote)
from jaxrl_reason.inference.verifier import (VerdictIds, VerifyRows, score, verdict_ids, verdict_logprobs,
                                             verify_prompts, verify_rows)

__all__ = [
    "SubsetEstimate", "best_of_k", "majority_at_k", "pass_at_k", "power_of_two_ks", "weighted_at_k",
    "CONCLUSION_MARKER", "THINK_CONCLUSION_MARKER", "BudgetRun", "Choice", "ForcedOutput", "LengthSelection",
    "accuracy_curves", "best_of_n", "budget_forcing", "evaluate", "majority_vote", "select_length_by_confidence",
    "truncate_to_last_sentence", "weighted_vote",
    "RefineResult", "make_generate", "self_refine",
    "evaluate_refinement", "forced_budgets", "length_selection", "majority_at_tokens", "refinement_report",
    "VerdictIds", "VerifyRows", "score", "verdict_ids", "verdict_logprobs", "verify_prompts", "verify_rows",
]
