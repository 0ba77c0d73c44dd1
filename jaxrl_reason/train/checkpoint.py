"""Orbax checkpoints of the whole training state: params, optimizer state, step, RNG key and data position.

Saves are atomic (Orbax writes to a temporary directory and renames), so a run killed mid-save leaves the
previous checkpoint intact and the half-written one is ignored on restore.
"""
from __future__ import annotations

import os
from typing import Optional

import jax
import orbax.checkpoint as ocp

from jaxrl_reason.train.state import TrainState


class Checkpointer:
    def __init__(self, directory: str, *, max_to_keep: int = 3):
        self.directory = os.path.abspath(directory)
        self._mngr = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

    def latest_step(self) -> Optional[int]:
        return self._mngr.latest_step()

    def all_steps(self):
        return list(self._mngr.all_steps())

    def save(self, state: TrainState, extra: dict) -> None:
        """`extra`: JSON-serialisable host state (data iterator position, method state such as CIPO's rho)."""
        step = int(jax.device_get(state.step))
        tree = {"step": state.step, "params": state.params, "opt_state": state.opt_state, "key": state.key}
        self._mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(tree),
                                                      extra=ocp.args.JsonSave(extra)), force=True)
        self._mngr.wait_until_finished()

    def restore(self, like: TrainState, step: Optional[int] = None) -> tuple[TrainState, dict]:
        """Restore into the structure (and shardings) of `like`."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint found in {self.directory}")
        target = {"step": like.step, "params": like.params, "opt_state": like.opt_state, "key": like.key}
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        out = self._mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                               extra=ocp.args.JsonRestore()))
        t = out["state"]
        return TrainState(t["step"], t["params"], t["opt_state"], t["key"]), dict(out["extra"])

    def close(self):
        self._mngr.close()


class LoopCheckpoints:
    """The checkpoints of a supervised loop (the warm-up stages, `trainer.sft_train`, `verify_warmup.train_verdicts`):
    params, optimizer state and the loop's host state (`extra`, JSON: data position, metrics so far) every `every`
    steps and at the last, one kept; `restore` continues from the latest save. `what` names the loop in errors."""

    def __init__(self, directory: str, every: int, mesh, what: str):
        if every < 1:
            raise ValueError(f"{what} checkpoint_every={every} must be >= 1 when checkpoint_dir is set")
        from jaxrl_reason.train.state import replicated_value

        self._replicated = lambda x: replicated_value(x, mesh)
        self.ckpt, self.every, self.what = Checkpointer(directory, max_to_keep=1), every, what
        self.key = self._replicated(jax.random.PRNGKey(0))  # unused by these loops; the checkpoint format has one

    def restore(self, params, opt_state, expect: dict, *, writer=None,
                log_offset: int = 0) -> Optional[tuple[int, object, object, dict]]:
        """-> (step, params, opt_state, extra) of the latest save, or None when there is none. `expect`: entries
        of `extra` this run must match (its step count "steps", its rows), else a ValueError names the directory.
        writer: the loop's MetricsWriter (logging at `log_offset + step`); the records it holds after the save,
        which the loop trains again, are forgotten."""
        if self.ckpt.latest_step() is None:
            return None
        import jax.numpy as jnp

        like = TrainState(self._replicated(jnp.asarray(0, jnp.int32)), params, opt_state, self.key)
        state, extra = self.ckpt.restore(like)
        for k, v in expect.items():
            if extra.get(k) != v:
                raise ValueError(f"the {self.what} checkpoint in {self.ckpt.directory} was saved with {k}="
                                 f"{extra.get(k)}, this run has {k}={v}; point it at a fresh directory or delete "
                                 "that one")
        if writer is not None:
            writer.forget(log_offset + int(state.step), log_offset + expect["steps"])
        return int(state.step), state.params, state.opt_state, extra

    def save(self, step: int, last: int, params, opt_state, extra: dict) -> None:
        """Saves at every `every`-th step and at step `last`."""
        if step % self.every == 0 or step == last:
            import jax.numpy as jnp

            self.ckpt.save(TrainState(self._replicated(jnp.asarray(step, jnp.int32)), params, opt_state, self.key),
                           extra)

    def close(self):
        self.ckpt.close()
