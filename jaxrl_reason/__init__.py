"""jaxrl_reason: RL from verifiable rewards for LLM reasoners in JAX, with the same policy trained to verify
(RL^V), critique (CURE) and correct its own work.

What a user calls is re-exported here and loaded on first use (so `import jaxrl_reason` stays cheap):

    from jaxrl_reason import load_pretrained, sample, Trainer, TrainerConfig, GRPO, RLV, CURE
"""
import importlib

_EXPORTS = {
    "load_pretrained": "models", "save_pretrained": "models", "init_model": "models", "ModelConfig": "models",
    "sample": "sampling",
    "TokenBatch": "rl", "build_token_batch": "rl", "ESTIMATORS": "rl", "objective": "rl", "term_spec": "rl",
    "register_term_kind": "rl", "pg_spec": "rl", "kl_spec": "rl", "sft_spec": "rl",
    "GRPO": "methods", "RLV": "methods", "CURE": "methods", "PolicyLossConfig": "methods",
    "make_method": "methods",
    "Trainer": "train", "TrainerConfig": "train", "make_update": "train", "sft_train": "train",
    "score": "inference", "majority_vote": "inference", "best_of_n": "inference", "weighted_vote": "inference",
    "self_refine": "inference", "evaluate": "inference",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'jaxrl_reason' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"jaxrl_reason.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
