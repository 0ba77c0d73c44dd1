"""Runs a test script as two `jax.distributed` CPU processes and as one process, for multi-host parity tests."""
import os
import socket
import subprocess
import sys


def cpu_devices_env(devices: int) -> dict:
    """The environment of a child process that simulates `devices` CPU devices.

    XLA:CPU runs every device's program on one thread pool sized by the core count (4 threads on a 2-core
    machine). A program whose collectives have no data dependence between them (one inside the layer scan, one
    outside it) can start them in a different order on different devices; a thread that waits in a collective
    holds its pool thread, and once every thread waits, a device that must reach the other collective first never
    runs -- a deadlock seen in CI with 4 devices on 4 threads. `NPROC` sizes that pool (XLA reads it at client
    creation), so give every device two threads.
    """
    env = dict(os.environ, JAX_PLATFORMS="cpu", NPROC=str(2 * devices))
    env.pop("XLA_FLAGS", None)
    if devices > 1:
        env["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={devices} "
                            "--xla_cpu_collective_call_terminate_timeout_seconds=600")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_two_and_one(script: str, worker_args, single_args, timeout: int) -> None:
    """`script worker I 2 PORT *worker_args` for I in 0, 1 (joined by jax.distributed), then
    `script single *single_args`; fails with the processes' output tails if any exits non-zero."""
    env = cpu_devices_env(4)
    env.pop("XLA_FLAGS", None)  # each process brings its own device count (2 per worker, 4 for one process)
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
