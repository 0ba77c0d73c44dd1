"""One metrics writer (JSONL + TensorBoard) and a progress bar for long loops."""
from __future__ import annotations

import json
import math
import os
import time
from typing import Mapping, Optional

import numpy as np


def to_scalars(metrics: Mapping) -> dict:
    out = {}
    for k, v in metrics.items():
        try:
            a = np.asarray(v)
        except Exception:  # noqa: BLE001 - non-numeric metrics are skipped, never fatal
            continue
        if a.size == 1 and np.issubdtype(a.dtype, np.number) or a.dtype == bool:
            out[k] = float(a.reshape(()))
    return out


class MetricsWriter:
    """Appends `{"step": s, **metrics}` lines to `<logdir>/metrics.jsonl` and mirrors them to TensorBoard.

    `enabled=False` (every process but 0 in multi-host runs) makes every call a no-op.
    """

    def __init__(self, logdir: str, *, tensorboard: bool = True, enabled: bool = True):
        self.enabled = enabled
        self.logdir = logdir
        self._tb = None
        if not enabled:
            return
        os.makedirs(logdir, exist_ok=True)
        self._jsonl = open(os.path.join(logdir, "metrics.jsonl"), "a")
        if tensorboard:
            try:
                from tensorboardX import SummaryWriter
                self._tb = SummaryWriter(logdir)
            except ImportError:
                self._tb = None

    def write(self, step: int, metrics: Mapping, *, prefix: str = "") -> dict:
        scalars = {prefix + k: v for k, v in to_scalars(metrics).items()}
        if not self.enabled:
            return scalars
        self._jsonl.write(json.dumps({"step": int(step), "time": time.time(), **{
            k: (v if math.isfinite(v) else str(v)) for k, v in scalars.items()}}) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, int(step))
            self._tb.flush()
        return scalars

    def forget(self, after: int, through: Optional[int] = None) -> None:
        """Drops the logged records with `after < step <= through` (None: every later step): the steps a resumed
        loop trains again after its last save, so metrics.jsonl holds each step once. TensorBoard's event files are
        append-only; its viewer shows the later value of a step written twice."""
        if not self.enabled:
            return
        self._jsonl.close()
        path = os.path.join(self.logdir, "metrics.jsonl")
        with open(path) as f:
            lines = [line for line in f if line.strip()]
        last = math.inf if through is None else through
        keep = [line for line in lines if not after < json.loads(line)["step"] <= last]
        if len(keep) != len(lines):
            with open(path + ".tmp", "w") as f:
                f.writelines(keep)
            os.replace(path + ".tmp", path)
        self._jsonl = open(path, "a")

    def close(self):
        """Flushes and closes the files and TensorBoard's writer thread; a second call is a no-op."""
        if self.enabled and not self._jsonl.closed:  # a write after close still raises (closed file)
            self._jsonl.close()
            if self._tb is not None:
                self._tb.close()
                self._tb = None


def read_metrics(logdir: str) -> list[dict]:
    path = os.path.join(logdir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
