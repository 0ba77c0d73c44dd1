"""Test harness that runs *inside* the sandbox, next to the untrusted program.

This file is not imported by the library: `sandbox.py` reads its source and hands it to the sandboxed
interpreter with `python -I -c`. It therefore uses only the standard library and stays compatible with the
oldest Python a sandbox might provide (3.8): the interpreter inside the sandbox need not be the trainer's.

Protocol (all fds are set up by the parent):
  fd 0        one job (a marshal-encoded dict; the parent is trusted), then EOF. Replaced by /dev/null before any untrusted code runs.
  fd 1, 2     untrusted output; the parent keeps a capped prefix and kills the sandbox past its cap.
  report_fd   JSON lines written only by this harness: `ready`, `program`, `test_start`, `test_end` and, last,
              `done` carrying the secret token. The parent passes a program only on a `done` line with the
              right token and one passing `test_end` per test; an exit code never counts.

The token is read from the job pipe, not argv, the environment or a file, so a program cannot pick it up from
its surroundings. A program in the same interpreter that deliberately walks the harness's frames could still
find it; in stdio mode the program runs in a child process and the harness makes itself non-dumpable, which
closes that door too.
"""
import marshal
import os
import resource
import sys
import time

try:  # the C module: `signal` itself imports `enum`, a large share of the harness start-up
    import _signal as signal
except ImportError:  # pragma: no cover - other interpreters
    import signal

# Kept before untrusted code runs: a program may rebind builtins or module attributes. Replacing
# `builtins.exec` with a no-op, for one, would otherwise make every later test "pass" without running.
_exec = exec
_compile = compile
_write = os.write
_monotonic = time.monotonic
_exit = os._exit
_MESSAGE_CHARS = 500


class _TestTimeout(BaseException):
    """Raised by SIGALRM inside a test; BaseException so that `except Exception` in the program lets it pass."""


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _safe_text(value):
    """str() of an object the program controls: its __str__ may raise or return a huge string."""
    try:
        text = value if isinstance(value, str) else str(value)
    except BaseException:  # noqa: BLE001 - untrusted __str__
        text = "<unprintable>"
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "...[truncated]"
    return text


def _describe(exc):
    try:
        name = type(exc).__name__
    except BaseException:  # noqa: BLE001
        name = "Exception"
    message = _safe_text(exc)
    return name + (": " + message if message else "")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json(value):
    """A minimal JSON encoder: importing `json` pulls in `re` and `enum`, ~40% of the harness start-up."""
    if value is None or value is True or value is False:
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        out = []
        for char in value:
            if char in _ESCAPES:
                out.append(_ESCAPES[char])
            elif char < " " or "\ud800" <= char <= "\udfff":
                out.append("\\u%04x" % ord(char))
            else:
                out.append(char)
        return '"' + "".join(out) + '"'
    return "{" + ", ".join(_json(str(k)) + ": " + _json(v) for k, v in value.items()) + "}"


class _Reporter:
    def __init__(self, fd):
        self.fd = fd

    def send(self, **event):
        line = (_json(event) + "\n").encode("utf-8", "replace")
        view = memoryview(line)
        while view:
            written = _write(self.fd, view)
            view = view[written:]


def _set_limits(limits):
    def cap(name, soft, hard=None):
        resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))

    cpu = int(limits["cpu_time_s"])
    # SIGXCPU at the soft limit, SIGKILL one second later at the hard limit, for a program that traps SIGXCPU.
    cap("RLIMIT_CPU", cpu, cpu + 1)
    cap("RLIMIT_AS", int(limits["memory_bytes"]))
    cap("RLIMIT_FSIZE", int(limits["max_file_bytes"]))
    cap("RLIMIT_NPROC", int(limits["max_processes"]))
    cap("RLIMIT_NOFILE", int(limits["max_open_files"]))
    cap("RLIMIT_CORE", 0)


def _make_undumpable():
    """Forbid ptrace and /proc/<pid>/mem on this process for same-uid children (the program in stdio mode)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_dumpable = 4
        libc.prctl(pr_set_dumpable, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the sandbox boundary does not depend on it
        pass


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _run_assert_job(job, token, reporter):
    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    signal.signal(signal.SIGALRM, _on_alarm)
    timeout = float(job["test_timeout_s"])
    cases = job["cases"]
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        if job.get("prelude"):
            _exec(_compile(job["prelude"], "<prelude>", "exec"), namespace)
        _exec(_compile(job["program"], "<solution>", "exec"), namespace)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as exc:  # noqa: BLE001 - anything the program does is a verdict, not a crash
        signal.setitimer(signal.ITIMER_REAL, 0)
        status = "timeout" if isinstance(exc, _TestTimeout) else "error"
        reporter.send(event="program", status=status, message=_describe(exc))
        return
    reporter.send(event="program", status="ok", message="")
    for index, source in enumerate(cases):
        reporter.send(event="test_start", index=index)
        start = _monotonic()
        try:
            code = _compile(source, "<test %d>" % index, "exec")
            signal.setitimer(signal.ITIMER_REAL, timeout)
            _exec(code, namespace)
            signal.setitimer(signal.ITIMER_REAL, 0)
            status, message = "passed", ""
        except BaseException as exc:  # noqa: BLE001
            signal.setitimer(signal.ITIMER_REAL, 0)
            if isinstance(exc, _TestTimeout):
                status, message = "timeout", "test exceeded %.3gs" % timeout
            elif isinstance(exc, AssertionError):
                status, message = "failed", _describe(exc)
            else:
                status, message = "error", _describe(exc)
        reporter.send(event="test_end", index=index, status=status, message=message, time_s=_monotonic() - start)
    _finish(reporter, token, len(cases))


def _finish(reporter, token, n_tests):
    # Flush the program's buffered prints first: the parent stops reading once `done` arrives.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - the program may have replaced or closed them
        pass
    reporter.send(event="done", token=token, n_tests=n_tests)


def _normalise(text, compare):
    if compare == "exact":
        return text
    if compare == "tokens":
        return text.split()
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _run_child(argv, stdin_bytes, timeout, max_output):
    """Run one test process with a wall-clock limit and capped output.

    Returns (status, stdout, stderr, returncode); status is None when the process ended on its own.
    """
    import selectors
    import subprocess

    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray()}
    pending = memoryview(stdin_bytes)
    selector = selectors.DefaultSelector()
    for fd in (out_fd, err_fd, in_fd):
        os.set_blocking(fd, False)
    selector.register(out_fd, selectors.EVENT_READ)
    selector.register(err_fd, selectors.EVENT_READ)
    stdin_open = True
    if pending:
        selector.register(in_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
        stdin_open = False
    deadline = _monotonic() + timeout
    status = None
    open_readers = 2
    while open_readers and status is None:
        remaining = deadline - _monotonic()
        if remaining <= 0:
            status = "timeout"
            break
        for key, _ in selector.select(remaining):
            fd = key.fd
            if fd == in_fd:
                try:
                    pending = pending[os.write(fd, pending[: 1 << 16]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:  # the program stopped reading; its verdict comes from its output
                    pending = pending[:0]
                if not pending:
                    selector.unregister(fd)
                    proc.stdin.close()
                    stdin_open = False
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                selector.unregister(fd)
                open_readers -= 1
                continue
            buffers[fd] += chunk
            if len(buffers[fd]) > max_output:
                status = "output_limit"
                break
    if status is not None:
        _kill_group(proc.pid)
    try:
        returncode = proc.wait(timeout=max(deadline - _monotonic(), 0.05))
    except subprocess.TimeoutExpired:
        # Output closed but the process lingers (e.g. a non-daemon thread keeps it alive): a timeout.
        _kill_group(proc.pid)
        returncode = proc.wait()
        status = status or "timeout"
    # Forked grandchildren may outlive a program that exited normally; they must not run into the next test.
    _kill_group(proc.pid)
    selector.close()
    for stream in (proc.stdin, proc.stdout, proc.stderr) if stdin_open else (proc.stdout, proc.stderr):
        stream.close()
    return status, bytes(buffers[out_fd]), bytes(buffers[err_fd]), returncode


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _run_stdio_job(job, token, reporter):
    _make_undumpable()
    source = (job.get("prelude") or "") + "\n" + job["program"]
    try:
        _compile(source, "solution.py", "exec")
    except BaseException as exc:  # noqa: BLE001 - pathological source: SyntaxError, RecursionError, MemoryError
        reporter.send(event="program", status="error", message=_describe(exc))
        return
    with open("solution.py", "w", encoding="utf-8") as handle:
        handle.write(source)
    reporter.send(event="program", status="ok", message="")
    argv = [sys.executable, "-I", "-B", "solution.py"]
    timeout = float(job["test_timeout_s"])
    max_output = int(job["max_output_bytes"])
    compare = job["compare"]
    for index, case in enumerate(job["cases"]):
        reporter.send(event="test_start", index=index)
        start = _monotonic()
        status, stdout, stderr, returncode = _run_child(argv, case["stdin"].encode("utf-8"), timeout, max_output)
        stdout = stdout.decode("utf-8", "replace")
        stderr = stderr.decode("utf-8", "replace")
        if status == "timeout":
            message = "test exceeded %.3gs" % timeout
        elif status == "output_limit":
            status, message = "error", "output exceeded %d bytes" % max_output
        elif returncode != 0:
            tail = stderr.strip().splitlines()[-1:] or ["exit code %d" % returncode]
            status, message = "error", _safe_text(tail[0])
        elif _normalise(stdout, compare) == _normalise(case["stdout"], compare):
            status, message = "passed", ""
        else:
            status = "failed"
            message = _safe_text("expected %r, got %r" % (case["stdout"][:200], stdout[:200]))
        reporter.send(event="test_end", index=index, status=status, message=message, time_s=_monotonic() - start)
    _finish(reporter, token, len(job["cases"]))


def main():
    job = marshal.loads(_read_all(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    report_fd = int(job.pop("report_fd"))
    os.set_inheritable(report_fd, False)
    token = job.pop("token")
    reporter = _Reporter(report_fd)
    _set_limits(job["limits"])
    # Sent before any untrusted code runs: without it the parent knows the sandbox itself failed to start.
    reporter.send(event="ready")
    if job["mode"] == "stdio":
        _run_stdio_job(job, token, reporter)
    else:
        _run_assert_job(job, token, reporter)
    # Skip interpreter shutdown: it would join the program's non-daemon threads and run its atexit hooks.
    _exit(0)


if __name__ == "__main__":
    main()
