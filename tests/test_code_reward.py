"""Code reward: extraction, verdicts, and the sandbox against hostile programs.

The hostile programs are real (an exponential fork bomb, an allocation loop, gigabytes of output, ...) but run
under tight limits (a few processes, 1 s of CPU, 256 MiB) so they are fast and cannot hurt a shared machine.
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from jaxrl_reason.rewards import sandbox as sandbox_lib
from jaxrl_reason.rewards.code import (
    CodeTests,
    IOCase,
    Sandbox,
    SandboxConfig,
    SandboxUnavailableError,
    as_code_tests,
    code_completion_reward,
    code_metrics,
    code_reward,
    extract_code,
)

HOSTILE = SandboxConfig(timeout_s=4.0, test_timeout_s=2.0, cpu_time_s=1, max_processes=8, memory_bytes=256 << 20,
                        max_output_bytes=256 << 10, workers=2)
F_OK = "def f(x):\n    return x + 1\n"
F_TEST = "assert f(1) == 2"


@pytest.fixture(scope="module")
def sandbox():
    try:
        box = Sandbox(HOSTILE)
    except SandboxUnavailableError as exc:
        pytest.fail(f"the sandbox must work wherever the tests run (see .ci/install_sandbox.sh): {exc}")
    yield box
    box.close()


# ------------------------------------------------------------------------------------------------ extraction


@pytest.mark.parametrize("text, expected", [
    ("```python\nx = 1\n```", "x = 1\n"),
    ("first\n```python\na = 1\n```\nthen\n```py\nb = 2\n```\n", "b = 2\n"),  # the last block wins
    ("```\nplain = True\n```", "plain = True\n"),  # an untagged fence counts as Python
    ("```python\ncode = 1\n```\nOutput:\n```text\n2\n```", "code = 1\n"),  # other languages are skipped
    ("~~~python\nt = '```'\n~~~", "t = '```'\n"),
    ("````python\ns = '''\n```\n'''\n````", "s = '''\n```\n'''\n"),  # a shorter fence does not close
    ("no code here", None),
    ("```python\nx = 1\n```\n```python\ny = (", None),  # the final block was cut off: wrong, no fallback
    ("```python\nx = 1", None),
    ("inline ```python x``` is not a fence", None),
    ("<think>```python\ndraft = 1\n```</think>\nanswer\n```python\nfinal = 2\n```", "final = 2\n"),
    ("<think>```python\ndraft = 1\n```</think> no code after thinking", None),
])
def test_extract_code(text, expected):
    assert extract_code(text) == expected


def test_extract_code_keeps_thinking_blocks_when_asked():
    assert extract_code("<think>\n```python\nd = 1\n```\n</think>", after_think=False) == "d = 1\n"


# ------------------------------------------------------------------------------------------------ test specs


def test_as_code_tests_shapes_and_errors():
    mbpp = as_code_tests({"test_list": ["assert g() == 1"], "test_imports": ["import math", "import os"]})
    assert mbpp.asserts == ("assert g() == 1",) and mbpp.prelude == "import math\nimport os"
    io = as_code_tests({"inputs": ["1\n"], "outputs": ["2\n"]})
    assert io.io == (IOCase("1\n", "2\n"),)
    human = as_code_tests({"test": "def check(c):\n    assert c() == 3\n", "entry_point": "h", "prompt": "P = 1\n"})
    assert human.asserts[0].rstrip().endswith("check(h)") and human.prelude == "P = 1\n"
    with pytest.raises(ValueError, match="exactly one of `asserts`"):
        as_code_tests(CodeTests())
    with pytest.raises(ValueError, match="exactly one of `asserts`"):
        as_code_tests(CodeTests(asserts=("pass",), io=(IOCase("", ""),)))
    with pytest.raises(ValueError, match="compare"):
        as_code_tests(CodeTests(io=(IOCase("", ""),), compare="fuzzy"))
    with pytest.raises(ValueError, match="`inputs` has 2 cases but `outputs` has 1"):
        as_code_tests({"inputs": ["1", "2"], "outputs": ["1"]})
    with pytest.raises(ValueError, match=r"tests\[3\].*unrecognised"):
        as_code_tests({"foo": 1}, where="tests[3]")
    with pytest.raises(ValueError, match="programs.*2 items.*tests.*1"):
        code_reward(["a", "b"], ["assert True"])


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="SandboxConfig.timeout_s"):
        Sandbox(SandboxConfig(timeout_s=0))
    with pytest.raises(ValueError, match="SandboxConfig.max_processes"):
        Sandbox(SandboxConfig(max_processes=2))
    with pytest.raises(ValueError, match="SandboxConfig.extra_ro_binds"):
        Sandbox(SandboxConfig(extra_ro_binds=("relative/path",)))


# ------------------------------------------------------------------------------------------------ verdicts


def test_verdicts_per_test(sandbox):
    programs = [
        F_OK,
        "def f(x):\n    return x + 2\n",  # wrong on one test of three
        "def f(x):\n    return 1 / 0\n",
        "def f(:\n",
        None,
    ]
    tests = [CodeTests(asserts=("assert f(0) == 1", "assert f(1) == 2", "assert f(-1) == 0"))] * 5
    result = code_reward(programs, tests, sandbox=sandbox)
    np.testing.assert_array_equal(result.scores, np.array([1, 0, 0, 0, 0], np.float32))
    assert result.scores.dtype == np.float32
    ok, wrong, raises, syntax, missing = result.details
    assert [t["status"] for t in ok["tests"]] == ["passed"] * 3 and ok["n_passed"] == 3
    assert [t["status"] for t in wrong["tests"]] == ["failed"] * 3
    assert [t["status"] for t in raises["tests"]] == ["error"] * 3
    assert raises["tests"][0]["message"].startswith("ZeroDivisionError")
    assert syntax["status"] == "program_error" and syntax["program_error"].startswith("SyntaxError")
    assert [t["status"] for t in syntax["tests"]] == ["not_run"] * 3
    assert missing["status"] == "no_answer" and missing["no_answer"] and missing["wall_s"] == 0.0


def test_messages_survive_the_report_channel(sandbox):
    nasty = 'quote " backslash \\ nul \x00 tab \t newline \n é 🙂 lone \ud800'
    result = code_reward(["M = " + repr(nasty)], ["assert False, M"], sandbox=sandbox)
    assert result.details[0]["tests"][0]["message"] == "AssertionError: " + nasty


_REAL_SELECTOR = sandbox_lib.selectors.DefaultSelector


class _ReportFirstSelector:
    """A selector that never reports the first fd registered (`_drive` registers the program's stdout first): the
    parent meets the harness's `done` line before reading a single print, the order load made happen at random."""

    def __init__(self):
        self._inner, self._hidden = _REAL_SELECTOR(), None

    def register(self, fd, events, data=None):
        self._hidden = fd if self._hidden is None else self._hidden
        return self._inner.register(fd, events, data)

    def unregister(self, fd):
        return self._inner.unregister(fd)

    def select(self, timeout=None):
        return [(k, e) for k, e in self._inner.select(timeout) if k.fd != self._hidden]

    def close(self):
        self._inner.close()


def test_prints_flushed_before_done_are_kept_when_done_is_read_first(sandbox, monkeypatch):
    """The harness flushes the program's prints before its `done` line; the parent stops reading at that line, so
    whatever of the prints it had not read yet must still be read from the pipe (a tool call printed "2" and got
    "(no output)" under load before this)."""
    monkeypatch.setattr(sandbox_lib.selectors, "DefaultSelector", _ReportFirstSelector)
    r = sandbox.run(sandbox_lib.Job(program="print(1 + 1)\nprint('x' * 5000)", mode="assert", cases=()))
    assert r["status"] == "passed" and r["output"].startswith("2\n" + "x" * 100), r


def test_stdio_tests_and_compare_modes(sandbox):
    double = "import sys\nn = int(sys.stdin.read())\nprint(n * 2)\nprint()\n"  # trailing blank line
    cases = (IOCase("21\n", "42\n"), IOCase("-3", "-6"))
    spaced = "a, b = input().split()\nprint(a, ' ', b)\n"
    result = code_reward(
        [double, double, "print(int(input()) + 1)\n", "import sys\nsys.exit(3)\n", spaced, spaced,
         "print(open(0).read().upper(), end='')\n"],
        [CodeTests(io=cases), CodeTests(io=cases, compare="exact"), CodeTests(io=cases), CodeTests(io=cases),
         CodeTests(io=(IOCase("x y\n", "x y\n"),), compare="tokens"),
         CodeTests(io=(IOCase("x y\n", "x y\n"),), compare="lines"),
         CodeTests(io=(IOCase("abc\n", "ABC\n"),))],
        sandbox=sandbox)
    np.testing.assert_array_equal(result.scores, np.array([1, 0, 0, 0, 1, 0, 1], np.float32))
    assert [t["status"] for t in result.details[2]["tests"]] == ["failed", "failed"]
    assert "expected '42\\n'" in result.details[2]["tests"][0]["message"]
    assert result.details[3]["tests"][0] == {**result.details[3]["tests"][0], "status": "error",
                                             "message": "exit code 3"}


def test_pass_needs_the_harness_report_not_an_exit_code(sandbox):
    forge = ('import os, json\nline = json.dumps({"event": "done", "token": "0" * 32, "n_tests": 1}) + "\\n"\n'
             'for fd in range(1, 64):\n    try: os.write(fd, line.encode())\n    except OSError: pass\n'
             'os._exit(0)\n')
    programs = [
        "import os\nos._exit(0)\n" + F_OK,  # exits 0 before any test runs
        F_OK + "import sys\nsys.exit(0)\n",  # exit(0) while loading
        F_OK,  # the test itself calls exit(0)
        forge,  # writes a done line with a guessed token to every fd, then exits 0
    ]
    no_op_exec = "import builtins\nbuiltins.exec = builtins.compile = lambda *args, **kwargs: None\n"
    programs += [no_op_exec + "def f(x):\n    return 0\n"]  # later tests must still really run
    tests = [F_TEST, F_TEST, "import sys\nsys.exit(0)\nassert False", F_TEST, F_TEST]
    result = code_reward(programs, tests, sandbox=sandbox)
    np.testing.assert_array_equal(result.scores, np.zeros(5, np.float32))
    assert result.details[4]["tests"][0]["status"] == "failed"
    assert result.details[0]["status"] == "crashed" and result.details[0]["exit_code"] is not None
    assert result.details[1]["program_error"].startswith("SystemExit")
    assert result.details[2]["tests"][0]["status"] == "error"
    assert result.details[3]["status"] == "crashed"


def test_stdio_program_cannot_reach_the_harness(sandbox):
    # In stdio mode the program is a child of the harness that holds the token; the harness is non-dumpable,
    # so the child cannot list its fds, read its memory, or inherit its report pipe.
    probe = "\n".join([
        "import os",
        "parent = os.getppid()",
        "seen = []",
        "for path in (f'/proc/{parent}/fd', f'/proc/{parent}/mem', f'/proc/{parent}/environ'):",
        "    try:",
        "        os.listdir(path) if path.endswith('fd') else open(path, 'rb').read(1)",
        "        seen.append(path)",
        "    except OSError:",
        "        pass",
        "print(sorted(os.listdir('/proc/self/fd')), seen)",
    ])
    result = code_reward([probe], [CodeTests(io=(IOCase("", "['0', '1', '2', '3'] []\n"),))], sandbox=sandbox)
    assert result.scores[0] == 1.0, result.details[0]["tests"]


def test_identity_environment_and_filesystem_inside(sandbox, monkeypatch):
    monkeypatch.setenv("JAXRL_TEST_SECRET", "hunter2")
    probe = "\n".join([
        "import os, socket",
        "assert os.getuid() != 0 and os.geteuid() != 0 and os.getgid() != 0",
        "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0]",
        "assert int(caps.split()[1], 16) == 0, caps",
        "assert 'JAXRL_TEST_SECRET' not in os.environ, os.environ",
        "assert not os.path.exists('/root') and not os.path.exists('/home')",
        "for path in ('/usr/jaxrl_probe', '/jaxrl_probe', '/etc/jaxrl_probe', '/dev/jaxrl_probe'):",
        "    try:",
        "        open(path, 'w')",
        "    except OSError:",
        "        pass",
        "    else:",
        "        raise AssertionError('wrote ' + path)",
        "open('/tmp/scratch', 'w').write('private')",  # the private tmpfs is writable
        "assert open('/tmp/scratch').read() == 'private'",
        "assert socket.gethostname() == 'sandbox'",
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())",
        "assert pids == [1, os.getpid()] and os.getpid() == 2, ('host processes are visible', pids)",
    ])
    result = code_reward([probe], ["pass"], sandbox=sandbox)
    assert result.scores[0] == 1.0, result.details[0]["program_error"]
    assert not os.path.exists("/tmp/scratch") or Path("/tmp/scratch").read_text() != "private"


# ------------------------------------------------------------------------------------------------ hostile


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture
def canary_dir():
    # World-writable, so only the read-only bind (not file permissions) stands between a program and it.
    path = tempfile.mkdtemp(prefix="jaxrl_canary_")
    os.chmod(path, 0o777)
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


def test_hostile_programs(canary_dir):
    box = Sandbox(HOSTILE._replace(extra_ro_binds=(canary_dir,)))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    # A process outside the sandbox with the sandbox's own uid: only the pid namespace protects it.
    sentinel = subprocess.Popen(["sleep", "60"], **sandbox_lib._privilege_kwargs(HOSTILE))
    me = os.getpid()
    fork_bomb = "import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    fork_count = ("import os, time\ndef f(x):\n    n = 0\n    while n < 100:\n        try:\n            pid = os.fork()\n"
                  "        except OSError:\n            return n\n        if pid == 0:\n            time.sleep(30)\n"
                  "            os._exit(0)\n        n += 1\n    return n\n")
    hostile = {
        "infinite_loop": ("def f(x):\n    while True:\n        pass\n", F_TEST, 0.0),
        "import_time_loop": ("while True:\n    pass\n" + F_OK, F_TEST, 0.0),
        "sigalrm_ignored_loop": ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                                 "def f(x):\n    while True:\n        pass\n", F_TEST, 0.0),
        "fork_bomb": (fork_bomb, F_TEST, 0.0),
        # Passes only if fork fails before max_processes: the limit is real, not just the wall clock.
        "fork_limit": (fork_count, f"assert 0 < f(0) < {HOSTILE.max_processes}", 1.0),
        "memory_bomb": ("def f(x):\n    hoard = []\n    while True:\n        hoard.append(b'x' * (1 << 24))\n",
                        F_TEST, 0.0),
        "network": (f"import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)"
                    ".sendall(b'escaped')\n    return x + 1\n", F_TEST, 0.0),
        "write_outside": (f"def f(x):\n    open({canary_dir!r} + '/escaped', 'w').write('x')\n    return x + 1\n",
                          F_TEST, 0.0),
        "write_tmp": (F_OK + "open('/tmp/jaxrl_escaped_tmp', 'w').write('x')\n", F_TEST, 1.0),
        "kill_parent": ("import os, signal\nfor pid in (-1, 1, os.getppid(), %d, %d):\n    try:\n"
                        "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n" % (me, sentinel.pid)
                        + F_OK, F_TEST, 1.0),
        # Fills the private tmpfs: bounded by its size (and each file by RLIMIT_FSIZE), then carries on.
        "fill_disk": ("import os\ndef f(x):\n    chunk = b'x' * (1 << 20)\n    total = 0\n    for i in range(100):\n"
                      "        try:\n            with open(f'/tmp/fill{i}', 'wb') as out:\n"
                      "                for _ in range(64):\n                    out.write(chunk)\n"
                      "        except OSError:\n            pass\n        total += os.path.getsize(f'/tmp/fill{i}')\n"
                      "    return total\n",
                      f"assert {HOSTILE.max_file_bytes} <= f(0) <= {HOSTILE.tmpfs_bytes}", 1.0),
        "exit_before_tests": ("import os\nos._exit(0)\n" + F_OK, F_TEST, 0.0),
        "gigabytes_of_output": ("import sys\ndef f(x):\n    chunk = 'x' * (1 << 20)\n    for _ in range(4096):\n"
                                "        sys.stdout.write(chunk)\n    return x + 1\n", F_TEST, 0.0),
        "output_after_tests": ("import atexit, os\natexit.register(lambda: [os.write(1, b'y' * 65536) "
                               "for _ in range(65536)])\n" + F_OK, F_TEST, 1.0),
        "lingering_thread": ("import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n"
                             + F_OK, F_TEST, 1.0),
        "stdio_fork_bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                            CodeTests(io=(IOCase("", ""),)), 0.0),
    }
    names = list(hostile)
    programs = [hostile[n][0] for n in names]
    tests = [hostile[n][1] for n in names]
    # A normal program after every hostile one: the pool keeps working.
    programs = [p for program in programs for p in (program, F_OK)]
    tests = [t for test in tests for t in (test, F_TEST)]
    start = time.monotonic()
    result = code_reward(programs, tests, sandbox=box)
    elapsed = time.monotonic() - start
    try:
        for i, name in enumerate(names):
            detail = result.details[2 * i]
            assert result.scores[2 * i] == hostile[name][2], (name, detail)
            assert detail["wall_s"] < HOSTILE.timeout_s + 1.5, (name, detail["wall_s"])
            assert result.scores[2 * i + 1] == 1.0, (f"normal program after {name}", result.details[2 * i + 1])
            assert not _processes_with(detail["job_id"]), f"{name} left processes behind"
        by_name = dict(zip(names, result.details[::2]))
        assert by_name["infinite_loop"]["timeout"]
        sigalrm = by_name["sigalrm_ignored_loop"]
        assert sigalrm["cpu_limit"] and sigalrm["killed_by"] == "SIGXCPU" and sigalrm["status"] == "timeout"
        assert by_name["memory_bomb"]["tests"][0]["message"].startswith("MemoryError")
        assert by_name["network"]["tests"][0]["status"] == "error"
        assert by_name["gigabytes_of_output"]["output_limit_exceeded"]
        assert len(by_name["gigabytes_of_output"]["output"]) <= HOSTILE.details_output_chars
        assert by_name["lingering_thread"]["wall_s"] < 2.0  # not held until the wall clock
        assert by_name["output_after_tests"]["wall_s"] < 2.0
        with pytest.raises(socket.timeout):
            listener.accept()
        assert os.listdir(canary_dir) == []
        assert not os.path.exists("/tmp/jaxrl_escaped_tmp")
        assert sentinel.poll() is None, "a process outside the sandbox was killed"
        # 30 programs on 2 workers, the slow ones bounded by the 4 s wall clock.
        assert elapsed < 30, elapsed
    finally:
        sentinel.kill()
        sentinel.wait()
        listener.close()
        box.close()


def test_timeouts_run_in_parallel_and_order_is_kept(sandbox):
    # The CPU-time limit sits far above the wall clock so that only the parent's deadline can stop the loops
    # (with cpu_time_s=1 < timeout_s a busy loop on an idle core hits RLIMIT_CPU first).
    config = HOSTILE._replace(timeout_s=1.5, test_timeout_s=5.0, cpu_time_s=30)
    box = Sandbox(config)
    try:
        loop = "def f(x):\n    while True:\n        pass\n"
        programs = [loop, F_OK, loop, "def f(x):\n    return 0\n", loop, loop]
        start = time.monotonic()
        result = code_reward(programs, [F_TEST] * 6, sandbox=box)
        elapsed = time.monotonic() - start
    finally:
        box.close()
    np.testing.assert_array_equal(result.scores, np.array([0, 1, 0, 0, 0, 0], np.float32))
    assert [d["status"] for d in result.details] == ["timeout", "passed", "timeout", "failed", "timeout", "timeout"]
    assert result.details[0]["tests"][0] == {"status": "timeout", "message": "sandbox wall-clock limit",
                                              "time_s": 0.0}
    # Four 1.5 s timeouts on two workers: two waves, not four.
    assert elapsed < 4 * 1.5, elapsed


def test_unsafe_execution_is_refused_unless_allowed():
    missing = SandboxConfig(bwrap="/nonexistent/bwrap", workers=1)
    with pytest.raises(SandboxUnavailableError, match="allow_unsafe_code_execution"):
        Sandbox(missing)
    with pytest.raises(SandboxUnavailableError):
        code_reward([F_OK], [F_TEST], config=missing)
    with pytest.warns(RuntimeWarning, match="UNSAFE CODE EXECUTION"):
        box = Sandbox(missing._replace(allow_unsafe_code_execution=True))
    try:
        assert not box.isolated
        with pytest.warns(RuntimeWarning, match="UNSAFE"):
            result = code_reward([F_OK, "def f(x):\n    return x\n"], [F_TEST, F_TEST], sandbox=box)
    finally:
        box.close()
    np.testing.assert_array_equal(result.scores, np.array([1, 0], np.float32))
    assert result.details[0]["sandbox"] == "unsafe"


def test_completion_reward_and_metrics(sandbox):
    completions = [
        "Here you go:\n```python\ndef f(x):\n    return x + 1\n```",
        "```python\ndef f(x):\n    return x + 1\n",  # unclosed: truncated, wrong
        "def f(x): return x + 1",  # no fence
        "```python\ndef f(x):\n    while True:\n        pass\n```",
    ]
    result = code_completion_reward(completions, [F_TEST] * 4, sandbox=sandbox)
    np.testing.assert_array_equal(result.scores, np.array([1, 0, 0, 0], np.float32))
    assert [d["no_answer"] for d in result.details] == [False, True, True, False]
    metrics = code_metrics(result.details)
    assert metrics["no_answer"] == 0.5 and metrics["timeout"] == 0.25 and metrics["test_pass_rate"] == 0.25
    assert metrics["sandbox_error"] == 0.0


# ------------------------------------------------------------------------------------------------ HumanEval


def _wrong_answer_wrapper(entry_point: str) -> str:
    """Appended to a correct program: the entry point now returns a different value of the same kind."""
    return f"""

def _jr_perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)(list(value) + [None])
    return ("not", value)

_jr_original = {entry_point}

def {entry_point}(*args, **kwargs):
    return _jr_perturb(_jr_original(*args, **kwargs))
"""


def _humaneval_check(problems, sandbox):
    good = [p.reference for p in problems]
    bad = [p.reference + _wrong_answer_wrapper(p.entry_point) for p in problems]
    result = code_reward(good + bad, [p.tests for p in problems] * 2, sandbox=sandbox)
    n = len(problems)
    failed_good = [p.task_id for p, s in zip(problems, result.scores[:n]) if s != 1.0]
    passed_bad = [p.task_id for p, s in zip(problems, result.scores[n:]) if s != 0.0]
    assert not failed_good, failed_good
    assert not passed_bad, passed_bad


def test_humaneval_canonical_pass_and_bugs_fail_subset():
    from jaxrl_reason.data.code_datasets import load_humaneval

    with Sandbox(SandboxConfig(workers=2)) as box:
        _humaneval_check(load_humaneval()[::16], box)


@pytest.mark.slow
def test_humaneval_canonical_pass_and_bugs_fail_all():
    from jaxrl_reason.data.code_datasets import load_humaneval

    problems = load_humaneval()
    assert len(problems) == 164
    with Sandbox(SandboxConfig(workers=2)) as box:
        _humaneval_check(problems, box)


def test_extraction_reads_back_what_the_prompt_module_fences():
    prompts = pytest.importorskip("jaxrl_reason.data.prompts")
    program = 'S = """\n```\n"""\nprint(S)'  # contains a fence line: the prompt must use a longer fence
    prompt = prompts.code_correction_prompt("Print three backticks.", program)
    assert extract_code(prompt) == program + "\n"


def test_sandbox_failures_are_told_apart_from_program_failures(sandbox):
    # A program cannot pass itself off as an infrastructure fault by imitating bwrap's error and dying.
    result = code_reward(["import os\nprint('bwrap: Can not mount', flush=True)\nos._exit(1)\n"], [F_TEST],
                         sandbox=sandbox)
    assert result.details[0]["status"] == "crashed" and not result.details[0]["sandbox_error"]
    broken = Sandbox(HOSTILE._replace(workers=1))
    try:
        prefix = broken.backend.prefix
        broken.backend = broken.backend._replace(prefix=prefix[:-2] + ("--ro-bind", "/nonexistent_jaxrl", "/x")
                                                 + prefix[-2:])
        detail = code_reward([F_OK], [F_TEST], sandbox=broken).details[0]
    finally:
        broken.close()
    assert detail["status"] == "sandbox_error" and detail["sandbox_error"] and "bwrap" in detail["output"]
    assert code_metrics([detail])["sandbox_error"] == 1.0
