"""Transparent huge pages for XLA:CPU's buffers, by restarting an entry-point script once with a glibc tunable.

Why: XLA:CPU allocates every temporary of a jitted call afresh through malloc, and glibc serves large blocks
with a new mmap each time, so each call page-faults its activations in 4 KiB at a time. On the 2-core
benchmark machine a GRPO update (8 x 8 rows of 80 tokens, 5M parameters) spent ~0.4 s of 2.6 s on those
faults. With `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` (glibc >= 2.35) malloc asks for transparent huge pages
(`madvise`), and the same update takes ~2.0 s; `experiments/bench/train_step.py` measures the whole step.

The tunable is read by the dynamic loader, so it cannot be switched on from inside a running Python process:
`reexec_with_huge_pages()` restarts the script with it, before anything heavy is imported. It does nothing
where it cannot help (not Linux/glibc, THP disabled, already set) or when `JAXRL_REASON_NO_REEXEC=1`.
On TPU/GPU it is harmless: host-side allocations only.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "JAXRL_REASON_NO_REEXEC"
_THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"


def _glibc_version() -> Optional[tuple]:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        return tuple(int(x) for x in version.split(".")[:2]) if name == "glibc" else None
    except (AttributeError, ValueError, OSError):
        return None


def _thp_mode(path: str = _THP_PATH) -> Optional[str]:
    """'always', 'madvise' or 'never' (the bracketed word of the sysfs file); None where there is none."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def huge_pages_env(environ: Mapping[str, str], *, glibc: Optional[tuple], thp: Optional[str]) -> Optional[dict]:
    """The environment to restart with, or None when a restart would not change anything."""
    if environ.get(OPT_OUT, "") not in ("", "0"):
        return None
    if glibc is None or glibc < (2, 35) or thp not in ("madvise", "always"):
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in current:
        return None
    env = dict(environ)
    env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}" if current else TUNABLE
    return env


def reexec_with_huge_pages() -> None:
    """Call first thing in an entry-point script. Replaces the process with the same command line plus the
    tunable, or returns at once. It acts only when called from the `__main__` module of a process started as a
    script file: importing that script (a test importing `experiments/train.py`) must not restart the importer."""
    if sys._getframe(1).f_globals.get("__name__") != "__main__":
        return
    if sys.platform != "linux" or not sys.argv or not os.path.isfile(sys.argv[0]):
        return
    env = huge_pages_env(os.environ, glibc=_glibc_version(), thp=_thp_mode())
    if env is None:
        return
    env[OPT_OUT] = "1"  # never loop, even if the loader ignored the tunable
    sys.stdout.flush(), sys.stderr.flush()
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]  # keeps flags such as -u
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)
