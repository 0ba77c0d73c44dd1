"""Runs a test script as two `jax.distributed` CPU processes and as one process, for multi-host parity tests."""
import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_two_and_one(script: str, worker_args, single_args, timeout: int) -> None:
    """`script worker I 2 PORT *worker_args` for I in 0, 1 (joined by jax.distributed), then
    `script single *single_args`; fails with the processes' output tails if any exits non-zero."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # each process brings its own device count
    port = str(free_port())
    workers = [subprocess.Popen([sys.executable, script, "worker", str(i), "2", port, *map(str, worker_args)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for i in range(2)]
    try:
        logs = [w.communicate(timeout=timeout)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert all(w.returncode == 0 for w in workers), "\n".join(log[-3000:] for log in logs)
    one = subprocess.run([sys.executable, script, "single", *map(str, single_args)], env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert one.returncode == 0, one.stderr[-3000:]
