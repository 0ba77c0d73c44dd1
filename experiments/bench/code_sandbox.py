"""Benchmark the code sandbox: per-program start-up cost and programs/s through the pool.

    python experiments/bench/code_sandbox.py [--workers 2] [--trivial 60] [--timeouts 6] [--repeats 30]

Rows (all measured in this one process run, same interpreter for sandbox and baseline):
  start-up     one trivial program, serially: plain `python -I -c` vs bare bwrap vs the full sandbox path
               (bwrap + harness + job/report pipes + verdict); median seconds per program.
  trivial      programs/s through a pool of `--workers`: plain subprocesses vs the sandbox.
  timeout      programs/s for programs that spin until a 1 s wall clock: ideal is workers / 1 s.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time

from jaxrl_reason.experiment.perf import time_runs
from jaxrl_reason.rewards import sandbox as sandbox_lib
from jaxrl_reason.rewards.code import CodeTests, Sandbox, SandboxConfig, code_reward

TRIVIAL = "def f(x):\n    return x + 1\n"
TRIVIAL_TEST = "assert f(1) == 2"
SPIN = "def f(x):\n    while True:\n        pass\n"


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm the page cache and the pool
    return time_runs(fn, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trivial", type=int, default=60, help="programs in the trivial throughput run")
    parser.add_argument("--timeouts", type=int, default=6, help="programs in the timeout throughput run")
    parser.add_argument("--repeats", type=int, default=30, help="serial runs per start-up measurement")
    args = parser.parse_args()

    config = SandboxConfig(workers=args.workers, timeout_s=1.0, test_timeout_s=5.0, cpu_time_s=5)
    box = Sandbox(config)
    python = box.backend.python
    privileges = sandbox_lib._privilege_kwargs(config)
    plain_argv = [python, "-I", "-c", "pass"]
    env = dict(sandbox_lib._ENV)

    plain = _median_seconds(lambda: subprocess.run(plain_argv, check=True, env=env), args.repeats)
    bare = None
    if box.isolated:
        bwrap_argv = list(box.backend.prefix) + plain_argv
        bare = _median_seconds(lambda: subprocess.run(bwrap_argv, check=True, env=env, **privileges), args.repeats)
    full = _median_seconds(lambda: code_reward([TRIVIAL], [TRIVIAL_TEST], sandbox=box), args.repeats)

    # Throughput baseline: the same program + test in plain subprocesses, same pool width, no isolation.
    source = TRIVIAL + TRIVIAL_TEST + "\n"
    with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        start = time.perf_counter()
        list(pool.map(lambda _: subprocess.run([python, "-I", "-c", source], check=True, env=env),
                      range(args.trivial)))
        plain_rate = args.trivial / (time.perf_counter() - start)
    start = time.perf_counter()
    result = code_reward([TRIVIAL] * args.trivial, [TRIVIAL_TEST] * args.trivial, sandbox=box)
    trivial_rate = args.trivial / (time.perf_counter() - start)
    assert result.scores.all(), "a trivial program failed"

    start = time.perf_counter()
    result = code_reward([SPIN] * args.timeouts, [CodeTests(asserts=(TRIVIAL_TEST,))] * args.timeouts, sandbox=box)
    timeout_rate = args.timeouts / (time.perf_counter() - start)
    assert all(d["timeout"] for d in result.details), "a spinning program did not time out"
    ideal_timeout_rate = args.workers / config.timeout_s
    box.close()

    print(f"code sandbox benchmark: backend={box.backend.kind} python={python} workers={args.workers} "
          f"cpus={os.cpu_count()} uid={os.geteuid()}")
    rows = [("start-up s/program (median)", "plain python", plain, "full sandbox", full, full / plain)]
    if bare is not None:
        rows.insert(0, ("start-up s/program (median)", "plain python", plain, "bare bwrap", bare, bare / plain))
    rows += [
        ("trivial programs/s", "plain subprocess", plain_rate, "sandbox pool", trivial_rate, trivial_rate / plain_rate),
        ("timeout programs/s (1 s wall)", "ideal workers/1s", ideal_timeout_rate, "sandbox pool", timeout_rate,
         timeout_rate / ideal_timeout_rate),
    ]
    header = f"{'what':32s} {'baseline':18s} {'value':>9s} {'measured':14s} {'value':>9s} {'ratio':>7s}"
    print(header)
    print("-" * len(header))
    for what, base_name, base, name, value, ratio in rows:
        print(f"{what:32s} {base_name:18s} {base:9.4f} {name:14s} {value:9.4f} {ratio:7.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
