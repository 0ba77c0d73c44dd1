"""The RL loop (`Trainer`), the fused jitted update, optimizer state, checkpoints, metrics and the warm-ups."""
from jaxrl_reason.train.state import TrainState, make_optimizer
from jaxrl_reason.train.trainer import NonFiniteLossError, Trainer, TrainerConfig, evaluate_accuracy, sft_train
from jaxrl_reason.train.update import UpdateOutput, make_sharded_update, make_update

__all__ = ["NonFiniteLossError", "TrainState", "Trainer", "TrainerConfig", "UpdateOutput", "evaluate_accuracy",
           "make_optimizer", "make_sharded_update", "make_update", "sft_train"]
