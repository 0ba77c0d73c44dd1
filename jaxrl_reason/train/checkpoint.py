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
