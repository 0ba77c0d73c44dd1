"""The one progress bar of the package (tqdm), for training loops and for callbacks that report (done, total)."""
from __future__ import annotations

from typing import Optional


def progress_bar(total: int, desc: str, *, initial: int = 0, disable: Optional[bool] = None, unit: str = "it"):
    """A tqdm bar; `disable=True` makes every call a no-op (non-main processes, progress=False)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, initial=initial, dynamic_ncols=True, disable=disable, leave=True, unit=unit)


class CallbackBar:
    """A progress bar fed by `at(done)` callbacks of a loop that counts from 0 (e.g. a sampler's steps); several
    loops can share it by moving `base` forward."""

    def __init__(self, enabled: bool, total: int, desc: str, unit: str = "it"):
        self.bar = progress_bar(total, desc, disable=not enabled, unit=unit)
        self.base = 0

    def at(self, done: int) -> None:
        self.bar.update(self.base + done - self.bar.n)

    def close(self) -> None:
        self.bar.close()
