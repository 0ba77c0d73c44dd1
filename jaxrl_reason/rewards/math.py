"""Math answer verifier: last `\\boxed{}` extraction + HF math-verify equivalence, time-bounded in worker processes.

Why worker processes: math-verify parses LaTeX into SymPy, and some inputs (`9^{9^{9^{9}}}`, huge factorials,
deeply nested radicals) make SymPy or GMP compute for minutes inside C code where no Python signal can interrupt
it. Its own timeout uses `signal.alarm`, which only works on the main thread of the main interpreter. So every
comparison runs in a small pool of persistent worker processes; the parent gives each item a hard deadline and
kills (and replaces) a worker that overruns it. Inside the worker a `setitimer` alarm gives a cheaper soft
timeout for the common case of slow *Python* code, so most timeouts cost no process restart.

Public API:
  find_boxed(text) -> BoxedAnswer            the last box, with an `unclosed` flag
  extract_boxed(text) -> str | None          its content, None if absent or unclosed
  math_reward(completions, answers) -> RewardResult
  answers_equivalent(a, b) -> bool           time-bounded math equivalence
  equivalence_classes(answers) -> list[int]  class ids for majority voting
  reward_metrics(result) -> dict[str, float] accuracy and the rate of each failure flag
  MathGrader / default_grader()              the pool; `run(fn, args)` is a generic time-bounded map
"""
from __future__ import annotations

import atexit
import collections
import json
import logging
import multiprocessing.connection
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from jaxrl_reason.rewards.base import RewardResult, summarize_details

# Flags in each item's `details` dict; `reward_metrics` reports the rate of each.
MATH_FLAGS = ("no_answer", "unclosed_box", "timeout", "parse_error")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


# ----------------------------------------------------------------------------------------------------------------
# Extraction (pure Python, linear time, runs in the parent)
# ----------------------------------------------------------------------------------------------------------------
class BoxedAnswer(NamedTuple):
    """The last `\\boxed`/`\\fbox` in a text.

    content: the text inside the box (braces balanced, outer braces removed, stripped), or None.
    unclosed: True when the last box opens a brace that never closes (a truncated generation); content is None.
    """

    content: str | None
    unclosed: bool


def find_boxed(text: str) -> BoxedAnswer:
    """Finds the LAST `\\boxed{...}` / `\\fbox{...}` (or brace-less `\\boxed 5`) in `text`.

    Only the last box counts, even if it is unclosed: a model that boxes a draft answer and then starts a second,
    truncated box has not committed to the first one.
    Escaped braces (`\\{`, `\\}`) do not count towards nesting, so `\\boxed{\\{1,2\\}}` gives `\\{1,2\\}`.
    """
    if not isinstance(text, str):
        return BoxedAnswer(None, False)
    last = None
    for last in _BOX_RE.finditer(text):
        pass
    if last is None:
        return BoxedAnswer(None, False)
    i, n = last.end(), len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return BoxedAnswer(None, True)
    if text[i] != "{":
        # `\boxed 5`: TeX takes the next token; models write the whole answer up to a space or the closing `$`.
        if i == last.end():  # `\boxedx` cannot happen (regex), but `\boxed\n` has no argument at all.
            return BoxedAnswer(None, True)
        m = re.match(r"[^\s$]+", text[i:])
        return BoxedAnswer(m.group(0).strip() if m else None, m is None)
    start = i + 1
    depth = 1
    i = start
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # an escaped character (`\{`, `\}`, `\\`) never changes nesting
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return BoxedAnswer(text[start:i].strip(), False)
        i += 1
    return BoxedAnswer(None, True)


def extract_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{}` in `text`; None when there is no box or the last one is unclosed."""
    return find_boxed(text).content


ANSWER_EXTRACTIONS = ("boxed", "boxed_or_last_number")
# A plain number: optional sign, digits with optional thousands commas, optional decimals or a fraction.
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d.])|(?<![\w.])-?\d+(?:\.\d+)?(?:/\d+)?(?![\d])")


def last_number(text: str) -> str | None:
    """The last plain number written in `text` (thousands commas dropped), or None.

    The "flexible" extraction of GSM8K-style evaluations: a model that has not learned the `\\boxed{}` format
    yet still gets credit for the number it ends on. Digits inside words (`x2`, `v1.5`) do not count."""
    if not isinstance(text, str):
        return None
    found = _NUMBER_RE.findall(text)
    return found[-1].replace(",", "") if found else None


_MATH_DELIMS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def normalize_gold(answer: str) -> str:
    """A reference answer as bare LaTeX: accepts `42`, `$42$`, `\\(42\\)`, `\\boxed{42}` or a full worked solution
    ending in a box (then the last box wins)."""
    s = str(answer).strip()
    if _BOX_RE.search(s):
        boxed = find_boxed(s)
        if boxed.content is not None:
            s = boxed.content
    if s.endswith(("$.", "\\).", "\\].")):  # a sentence-final period after the closing delimiter
        s = s[:-1]
    changed = True
    while changed:
        changed = False
        for left, right in _MATH_DELIMS:
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                s = s[len(left):len(s) - len(right)].strip()
                changed = True
    return s


# `\\` (a matrix row break) is matched first so that its second backslash is never read as a thin space `\ `.
_SPACING_RE = re.compile(r"\\\\|\\[,;:! ]|\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\displaystyle(?![A-Za-z])")
_FRAC_RE = re.compile(r"\\[dt]frac(?![A-Za-z])")
_WS_RE = re.compile(r"\s+")
_WS_NEXT_TO_SYMBOL_RE = re.compile(r" (?=[^A-Za-z0-9])|(?<=[^A-Za-z0-9]) ")
_INTEGER_RE = re.compile(r"-?[0-9]{1,300}\Z")


def canonical_form(answer: str) -> str:
    """A conservative textual normal form: two answers with the same form are equal without asking SymPy.

    Only removes what cannot change meaning — math delimiters, thin spaces, `\\left`/`\\right`, `\\dfrac` vs
    `\\frac`, a trailing period, whitespace next to a symbol — so the fast path can never accept a wrong answer.
    Whitespace between two letters/digits is kept: `\\pi r` is not `\\pir`, `2 3` is not `23`.
    """
    s = normalize_gold(answer)
    s = _SPACING_RE.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", s)
    s = _FRAC_RE.sub(r"\\frac", s)
    s = _WS_RE.sub(" ", s).strip()
    s = _WS_NEXT_TO_SYMBOL_RE.sub("", s)
    s = s.rstrip(".").strip()
    return s


# ----------------------------------------------------------------------------------------------------------------
# Worker side
# ----------------------------------------------------------------------------------------------------------------
class _SoftTimeout(BaseException):
    """Raised by the worker's interval timer. A BaseException so library code's `except Exception` won't eat it."""


def _on_alarm(signum, frame):
    raise _SoftTimeout()


def _worker_main(conn, preload: Sequence[str], memory_limit_mb: int | None) -> None:
    """Loop of one worker process: receive `(task_id, pickled (fn, args), soft_timeout_s)`, reply `(task_id, status, value,
    error)`. Exits on `None` or when the parent's end of the socket closes (so an orphan never outlives it)."""
    import importlib

    # Ctrl-C in the trainer reaches the whole process group; the parent decides when workers die.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_limit_mb:
        import resource

        limit = int(memory_limit_mb) * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass  # a hard limit below ours is already stricter
    for name in preload:
        importlib.import_module(name)
    # We disable math-verify's own signal timeouts (they would cancel our timer); silence its warning about that.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    signal.signal(signal.SIGALRM, _on_alarm)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task_id, payload, soft_timeout_s = msg
        # A previous task may have left SIGALRM blocked (C extensions sometimes do), maybe with a stale alarm
        # pending: discard it under SIG_IGN, then re-arm our handler, so the timer works and fires only for us.
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        signal.signal(signal.SIGALRM, _on_alarm)
        try:
            # Unpickled here, not by recv(): a function this process cannot import is an error result. Before the
            # timer: importing the function's module is set-up, not the item's work (the hard deadline still runs).
            fn, args = pickle.loads(payload)
        except Exception as e:  # noqa: BLE001
            conn.send((task_id, "error", None, f"cannot load task in worker: {type(e).__name__}: {str(e)[:300]}"))
            continue
        try:
            signal.setitimer(signal.ITIMER_REAL, max(float(soft_timeout_s), 1e-3))
            try:
                reply = (task_id, "ok", fn(*args), "")
            except Exception as e:  # noqa: BLE001 - any failure of the graded function is a result, not a crash
                # Formatting the message stays under the timer: str() of a huge SymPy object can itself hang.
                reply = (task_id, "error", None, f"{type(e).__name__}: {str(e)[:300]}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _SoftTimeout:
            reply = (task_id, "timeout", None, "soft timeout in worker")
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 - an unpicklable return value must not kill the worker
            conn.send((task_id, "error", None, f"unpicklable result: {type(e).__name__}"))


def _worker_entry() -> None:
    """Entry point of `python -c` in a worker: the socket fd and settings come from argv."""
    import json
    import sys

    fd = int(sys.argv[1])
    settings = json.loads(sys.argv[2])
    conn = multiprocessing.connection.Connection(fd)
    _worker_main(conn, settings["preload"], settings["memory_limit_mb"])


# The worker is a fresh interpreter (not multiprocessing's spawn/forkserver): those re-import the parent's
# `__main__` in every worker — a training script importing JAX — and share one global forkserver with other code.
_BOOTSTRAP = ("import sys, json, os; sys.path[:] = json.loads(os.environ['JAXRL_REASON_WORKER_PATH']); "
              "from jaxrl_reason.rewards.math import _worker_entry; _worker_entry()")


def _as_math(s: str) -> str:
    return "$" + s + "$"


def _compare_in_worker(gold: str, pred: str) -> tuple[bool, bool, bool]:
    """`(equal, gold_parsed, pred_parsed)` for two bare-LaTeX answers; `gold` plays math-verify's gold role.

    `*_parsed` is False when math-verify found no mathematical reading and fell back to the raw string (it then
    compares strings exactly, which is still a valid comparison, e.g. for `\\text{Monday}`)."""
    from math_verify import parse, verify

    g = parse(_as_math(gold), parsing_timeout=None)
    p = parse(_as_math(pred), parsing_timeout=None)
    gold_ok = any(not isinstance(x, str) for x in g)
    pred_ok = any(not isinstance(x, str) for x in p)
    if not g or not p:
        return False, gold_ok, pred_ok
    return bool(verify(g, p, timeout_seconds=None)), gold_ok, pred_ok


# ----------------------------------------------------------------------------------------------------------------
# Parent side: the pool
# ----------------------------------------------------------------------------------------------------------------
class TaskOutcome(NamedTuple):
    """Result of one item of `MathGrader.run`.

    status: "ok" (value holds the return value), "timeout" (soft or hard), "error" (the function raised; `error`
            says what) or "crashed" (the worker died, e.g. out of memory).
    """

    status: str
    value: Any
    error: str


class _Worker:
    __slots__ = ("proc", "conn", "ready", "task", "deadline", "n_done", "started")

    def __init__(self, proc: subprocess.Popen, conn: multiprocessing.connection.Connection):
        self.proc = proc
        self.conn = conn
        self.ready = False
        self.task: int | None = None
        self.deadline = 0.0
        self.n_done = 0
        self.started = time.monotonic()


def _kill_worker(w: _Worker) -> None:
    if w.proc.poll() is None:
        w.proc.kill()
    try:
        w.proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass
    try:
        w.conn.close()
    except OSError:
        pass


def _kill_workers(workers: list[_Worker]) -> None:
    for w in workers:
        _kill_worker(w)
    workers.clear()


class MathGrader:
    """A persistent pool of grading processes with a hard per-item deadline.

    Args:
      num_workers: processes; default min(4, cpu count).
      timeout_s: default per-item budget. The worker's own timer fires at `timeout_s`; if the worker is stuck in C
        code, the parent kills it at `timeout_s + kill_grace_s` and starts a replacement.
      max_tasks_per_worker: a worker is retired after this many items (SymPy caches grow without bound).
      memory_limit_mb: address-space limit of each worker (RLIMIT_AS); None for no limit.
      cache_size: successful comparisons remembered across calls (timeouts and errors are not cached, since
        a timeout on a loaded machine says little about the next try).
      startup_timeout_s: how long a new worker may take to import its modules before the pool gives up.
      preload: modules each worker imports before it reports ready (so the first item's clock is fair).

    Workers are fresh `python` processes connected by a socket; they start lazily on the first call and are
    reused. One call runs at a time (a lock serialises threads). Linux/macOS only (uses `setitimer`).
    """

    def __init__(self, num_workers: int | None = None, *, timeout_s: float = 5.0, kill_grace_s: float = 1.0,
                 max_tasks_per_worker: int = 2000, memory_limit_mb: int | None = 4096,
                 cache_size: int = 100_000, startup_timeout_s: float = 120.0,
                 preload: Sequence[str] = ("math_verify",)):
        if num_workers is None:
            num_workers = min(4, os.cpu_count() or 1)
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
        if kill_grace_s < 0:
            raise ValueError(f"kill_grace_s must be >= 0, got {kill_grace_s}.")
        if max_tasks_per_worker < 1:
            raise ValueError(f"max_tasks_per_worker must be >= 1, got {max_tasks_per_worker}.")
        self.num_workers = int(num_workers)
        self.timeout_s = float(timeout_s)
        self.kill_grace_s = float(kill_grace_s)
        self.max_tasks_per_worker = int(max_tasks_per_worker)
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout_s = float(startup_timeout_s)
        self.preload = tuple(preload)
        self._workers: list[_Worker] = []  # mutated in place: the finalizer holds this very list
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._cache: collections.OrderedDict[tuple[str, str], tuple[bool, bool, bool]] = collections.OrderedDict()
        self._cache_size = int(cache_size)
        self._stats: collections.Counter[str] = collections.Counter()
        self._finalizer = weakref.finalize(self, _kill_workers, self._workers)

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def _start_worker(self) -> _Worker:
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ)
        env["JAXRL_REASON_WORKER_PATH"] = json.dumps([p for p in sys.path if isinstance(p, str)])
        # SymPy needs one thread; BLAS pools in N workers would only fight the trainer for cores.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        settings = json.dumps({"preload": list(self.preload), "memory_limit_mb": self.memory_limit_mb})
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOTSTRAP, str(child_sock.fileno()), settings],
                                    pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, env=env, close_fds=True)
        finally:
            child_sock.close()
        conn = multiprocessing.connection.Connection(parent_sock.detach())
        self._stats["workers_started"] += 1
        return _Worker(proc, conn)

    def _stop_worker(self, w: _Worker, *, kill: bool) -> None:
        if not kill:
            try:
                w.conn.send(None)
                w.proc.wait(timeout=2.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        _kill_worker(w)

    def _check_pid(self) -> None:
        # After os.fork() the child must not talk to (or kill) the parent's workers; it starts its own.
        if os.getpid() != self._pid:
            self._workers = []
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _kill_workers, self._workers)
            self._pid = os.getpid()
            self._lock = threading.RLock()

    def start(self, wait: bool = True) -> None:
        """Starts the workers now (they start lazily otherwise), e.g. to overlap their imports with JIT compilation.

        With `wait`, returns once every worker has imported its modules; raises RuntimeError if one dies or takes
        longer than `startup_timeout_s`.
        """
        with self._lock:
            self._check_pid()
            while len(self._workers) < self.num_workers:
                self._workers.append(self._start_worker())
            while wait:
                starting = [w for w in self._workers if not w.ready]
                if not starting:
                    return
                limit = min(w.started for w in starting) + self.startup_timeout_s
                readable = set(multiprocessing.connection.wait([w.conn for w in starting],
                                                               timeout=max(0.0, limit - time.monotonic())))
                for w in starting:
                    if w.conn not in readable:
                        continue
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        self._replace(w, kill=True, restart=False)
                        raise RuntimeError(
                            f"a math grader worker died on start-up (exit code {w.proc.poll()}); check that "
                            f"`python -c 'import {', '.join(self.preload) or 'sys'}'` works.") from None
                    w.ready = msg[0] == "ready"
                if time.monotonic() >= limit and any(not w.ready for w in self._workers):
                    raise RuntimeError(f"math grader workers did not become ready within "
                                       f"{self.startup_timeout_s:.0f} s; the machine may be overloaded.")

    def close(self) -> None:
        """Stops all workers. The grader may be used again afterwards (it restarts lazily)."""
        with self._lock:
            self._check_pid()
            workers = list(self._workers)
            self._workers.clear()
            for w in workers:
                self._stop_worker(w, kill=w.task is not None or not w.ready)

    def __enter__(self) -> "MathGrader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Counters since creation: items, timeouts, hard_kills, crashes, errors, exact_matches, integer_compares,
        cache_hits, workers_started, workers_recycled."""
        return dict(self._stats)

    @property
    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    # -- the generic time-bounded map ----------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], arg_tuples: Sequence[tuple], *,
            timeout_s: float | None = None) -> list[TaskOutcome]:
        """Runs `fn(*args)` for each tuple in the workers, each under its own deadline; results in input order.

        `fn` must be a module-level function (it is pickled by reference) returning a picklable value.
        Never raises because of what `fn` does; raises RuntimeError only if workers cannot be started at all.
        """
        timeout_s = self.timeout_s if timeout_s is None else float(timeout_s)
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}.")
        n = len(arg_tuples)
        if n == 0:
            return []
        with self._lock:
            self._check_pid()
            return self._run_locked(fn, arg_tuples, timeout_s)

    def _replace(self, w: _Worker, *, kill: bool, restart: bool = True) -> None:
        self._workers.remove(w)
        self._stop_worker(w, kill=kill)
        if restart:
            # Start the successor now: it imports in the background while the caller goes on.
            self._workers.append(self._start_worker())

    def _run_locked(self, fn, arg_tuples, timeout_s) -> list[TaskOutcome]:
        n = len(arg_tuples)
        results: list[TaskOutcome | None] = [None] * n
        pending = collections.deque(range(n))
        remaining = n
        startup_failures = 0

        def finish(i: int, outcome: TaskOutcome) -> None:
            nonlocal remaining
            results[i] = outcome
            remaining -= 1
            self._stats["items"] += 1
            if outcome.status != "ok":
                self._stats[outcome.status + ("s" if outcome.status != "crashed" else "")] += 1

        while remaining:
            while len(self._workers) < self.num_workers:
                self._workers.append(self._start_worker())
            for w in self._workers:
                if not pending:
                    break
                if w.ready and w.task is None:
                    i = pending.popleft()
                    try:
                        payload = pickle.dumps((fn, tuple(arg_tuples[i])), protocol=pickle.HIGHEST_PROTOCOL)
                    except Exception as e:  # noqa: BLE001 - an unpicklable item fails alone
                        finish(i, TaskOutcome("error", None, f"cannot send to worker: {type(e).__name__}: {e}"))
                        continue
                    try:
                        w.conn.send((i, payload, timeout_s))
                    except (OSError, ValueError):
                        pending.appendleft(i)  # dead worker: its socket reads EOF below and it is replaced
                        continue
                    w.task = i
                    w.deadline = time.monotonic() + timeout_s + self.kill_grace_s
            deadlines = [w.deadline for w in self._workers if w.task is not None]
            deadlines += [w.started + self.startup_timeout_s for w in self._workers if not w.ready]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.05
            readable = set(multiprocessing.connection.wait([w.conn for w in self._workers], timeout=wait_s))
            for w in [w for w in self._workers if w.conn in readable]:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    # The worker died: out of memory, a segfault in a C extension, or killed from outside.
                    try:
                        code = w.proc.wait(timeout=1.0)
                    except subprocess.TimeoutExpired:
                        code = None
                    if not w.ready:
                        startup_failures += 1
                        if startup_failures > 3:
                            self._replace(w, kill=True, restart=False)
                            raise RuntimeError(
                                f"math grader workers keep dying on start-up (exit code {w.proc.returncode}); "
                                f"check that `python -c 'import {', '.join(self.preload) or 'sys'}'` works "
                                "and that jaxrl_reason is importable from sys.path.")
                    if w.task is not None:
                        finish(w.task, TaskOutcome("crashed", None, f"worker died (exit code {code})"))
                    self._replace(w, kill=True)
                    continue
                if msg[0] == "ready":
                    w.ready = True
                    continue
                task_id, status, value, error = msg
                if task_id == w.task:
                    finish(task_id, TaskOutcome(status, value, error))
                w.task = None
                w.n_done += 1
                if w.n_done >= self.max_tasks_per_worker:
                    self._stats["workers_recycled"] += 1
                    self._replace(w, kill=False)
            now = time.monotonic()
            for w in list(self._workers):
                if w.task is not None and now >= w.deadline:
                    self._stats["hard_kills"] += 1
                    finish(w.task, TaskOutcome("timeout", None, "hard timeout: worker killed"))
                    self._replace(w, kill=True)
                elif not w.ready and now >= w.started + self.startup_timeout_s:
                    self._replace(w, kill=True, restart=False)
                    raise RuntimeError(
                        f"a math grader worker did not become ready within {self.startup_timeout_s:.0f} s; "
                        "the machine may be overloaded (raise startup_timeout_s).")
        return results  # type: ignore[return-value]

    # -- math comparisons ---------------------------------------------------------------------------------------
    def compare(self, pairs: Sequence[tuple[str, str]], *,
                timeout_s: float | None = None) -> list[tuple[TaskOutcome, tuple[bool, bool, bool] | None]]:
        """Math-verify comparison of `(gold, pred)` pairs of bare-LaTeX answers.

        Returns per pair `(outcome, (equal, gold_parsed, pred_parsed) or None when not ok)`. Equal canonical
        forms and pairs of plain integers skip the pool; duplicate pairs within a call are graded once; successes
        are cached across calls.
        """
        with self._lock:  # the cache is shared state too
            return self._compare_locked(pairs, timeout_s)

    def _compare_locked(self, pairs, timeout_s):
        out: list[Any] = [None] * len(pairs)
        todo: dict[tuple[str, str], list[int]] = {}
        raw: dict[tuple[str, str], tuple[str, str]] = {}
        for i, (a, b) in enumerate(pairs):
            key = (canonical_form(a), canonical_form(b))
            if key[0] and key[0] == key[1]:
                out[i] = (TaskOutcome("ok", None, "exact"), (True, True, True))
                self._stats["exact_matches"] += 1
            elif _INTEGER_RE.match(key[0]) and _INTEGER_RE.match(key[1]):
                # Two integers are equal exactly when their values are: no parser needed, and most wrong answers
                # on integer-answer tasks end here instead of costing a worker round trip each.
                out[i] = (TaskOutcome("ok", None, "integers"), (int(key[0]) == int(key[1]), True, True))
                self._stats["integer_compares"] += 1
            elif key in self._cache:
                self._cache.move_to_end(key)
                out[i] = (TaskOutcome("ok", None, "cached"), self._cache[key])
                self._stats["cache_hits"] += 1
            else:
                todo.setdefault(key, []).append(i)
                raw.setdefault(key, (a, b))
        keys = list(todo)
        # The worker sees the original strings: the canonical form only decides which pairs are duplicates.
        outcomes = self.run(_compare_in_worker, [raw[k] for k in keys], timeout_s=timeout_s)
        for key, outcome in zip(keys, outcomes):
            verdict = tuple(outcome.value) if outcome.status == "ok" else None
            if verdict is not None:
                self._cache[key] = verdict
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            for i in todo[key]:
                out[i] = (outcome, verdict)
        return out


_SHARED: dict[str, MathGrader] = {}
_SHARED_LOCK = threading.Lock()


def shared_grader(name: str, **kwargs) -> MathGrader:
    """A process-wide grader registered under `name`, created on first use (with `kwargs`) and closed at exit."""
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = MathGrader(**kwargs)
            atexit.register(_SHARED[name].close)
        return _SHARED[name]


def default_grader() -> MathGrader:
    """The process-wide math grader."""
    return shared_grader("math")


# ----------------------------------------------------------------------------------------------------------------
# Rewards and equivalence
# ----------------------------------------------------------------------------------------------------------------
def math_reward(completions: Sequence[str], answers: Sequence[str], *, timeout_s: float | None = None,
                grader: MathGrader | None = None, extraction: str = "boxed") -> RewardResult:
    """Binary reward: 1 iff the last `\\boxed{}` of the completion is mathematically equal to the gold answer.

    Args:
      completions: [N] model outputs (generated text only).
      answers: [N] gold answers, bare or wrapped in `$...$` / `\\boxed{}`.
      timeout_s: per-item budget (default: the grader's).
      grader: a MathGrader; default `default_grader()`.
      extraction: "boxed" (strict: only a box counts) or "boxed_or_last_number" (a completion without a
        non-empty box is graded on the last plain number it writes, see `last_number`).

    Returns RewardResult with scores float32 [N] and per item:
      extracted (str | None), from_last_number (the boxed_or_last_number fallback was used),
      no_answer (nothing to grade: no box or an empty one, and no number under the fallback), unclosed_box, timeout, parse_error (the
      prediction, or `gold_parse_error` the gold, could not be parsed, or the comparison raised; see `error`).
    Never raises because of model output.
    """
    if len(completions) != len(answers):
        raise ValueError(f"math_reward got {len(completions)} completions but {len(answers)} answers; "
                         "pass one gold answer per completion (repeat each answer G times for a group).")
    if extraction not in ANSWER_EXTRACTIONS:
        raise ValueError(f"math_reward extraction={extraction!r} is unknown; use one of {ANSWER_EXTRACTIONS}")
    grader = grader or default_grader()
    n = len(completions)
    scores = np.zeros([n], np.float32)
    details: list[dict[str, Any]] = []
    pairs, pair_rows = [], []
    for i, (completion, answer) in enumerate(zip(completions, answers)):
        boxed = find_boxed(completion)
        content, fallback = boxed.content, False
        if not content and extraction == "boxed_or_last_number":
            content = last_number(completion)
            fallback = content is not None
        d = {"extracted": content, "from_last_number": fallback, "no_answer": not content and not boxed.unclosed,
             "unclosed_box": boxed.unclosed, "timeout": False, "parse_error": False, "gold_parse_error": False}
        details.append(d)
        if content:
            pairs.append((normalize_gold(answer), content))
            pair_rows.append(i)
    for i, (outcome, verdict) in zip(pair_rows, grader.compare(pairs, timeout_s=timeout_s)):
        d = details[i]
        if verdict is not None:
            equal, gold_ok, pred_ok = verdict
            scores[i] = float(equal)
            d["parse_error"] = not pred_ok
            d["gold_parse_error"] = not gold_ok
        elif outcome.status == "timeout":
            d["timeout"] = True
        else:
            d["parse_error"] = True
            d["error"] = outcome.error
    return RewardResult(scores=scores, details=details)


def reward_metrics(result: RewardResult, flags: Sequence[str] = MATH_FLAGS, prefix: str = "") -> dict[str, float]:
    """`{prefix}accuracy` (mean score) and `{prefix}{flag}_rate` for each detail flag."""
    scores = np.asarray(result.scores, np.float32)
    metrics = {f"{prefix}accuracy": float(scores.mean()) if scores.size else 0.0}
    for key, rate in summarize_details(result.details, flags).items():
        metrics[f"{prefix}{key}_rate"] = rate
    return metrics


def answers_equivalent(a: str, b: str, *, timeout_s: float | None = None,
                       grader: MathGrader | None = None) -> bool:
    """Whether two answers are mathematically equal (math-verify with `a` as gold); False on timeout or error."""
    grader = grader or default_grader()
    _, verdict = grader.compare([(normalize_gold(a), normalize_gold(b))], timeout_s=timeout_s)[0]
    return bool(verdict and verdict[0])


def equivalence_classes(answers: Sequence[str | None], *, timeout_s: float | None = None,
                        grader: MathGrader | None = None) -> list[int]:
    """Class ids `[N]` grouping answers by math equivalence (ids 0, 1, ... in order of first appearance).

    Greedy against representatives: each distinct answer joins the first earlier class whose representative
    (first member) it equals, else opens a new class — math-verify's equality is not guaranteed transitive, so
    this fixes one deterministic grouping. A None or empty answer (nothing extracted) gets id -1 and is never
    grouped. Cost is at most one comparison per (distinct answer, class) pair, run in parallel and cached.
    """
    grader = grader or default_grader()
    ids = [-1] * len(answers)
    reps: list[str] = []  # canonical form of each class's representative
    reps_raw: list[str] = []
    by_form: dict[str, int] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        bare = normalize_gold(a)
        form = canonical_form(bare)
        if not form:
            continue
        if form in by_form:
            ids[i] = by_form[form]
            continue
        cls = -1
        if reps_raw:
            verdicts = grader.compare([(r, bare) for r in reps_raw], timeout_s=timeout_s)
            for c, (_, verdict) in enumerate(verdicts):
                if verdict is not None and verdict[0]:
                    cls = c
                    break
        if cls < 0:
            cls = len(reps)
            reps.append(form)
            reps_raw.append(bare)
        by_form[form] = cls
        ids[i] = cls
    return ids
