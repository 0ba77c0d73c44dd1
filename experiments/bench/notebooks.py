"""Wall time of each notebook in colabs/, run top to bottom headless at its full (Colab) size or --smoke size.

    python experiments/bench/notebooks.py [--smoke] [--repeats 1] [--only 04] [--compiles] [--write]

Uses the runner CI uses (`jaxrl_reason.experiment.notebooks`: code cells in order, `!pip` cells skipped). --write
commits a notebook executed: it writes each cell's printed text and figure (one PNG) back into the .ipynb, with
the size, date, seconds and CPU in its metadata (`nice python experiments/bench/notebooks.py --write --only 04`
after editing 04; one notebook at a time on a shared machine). Prints a markdown table:
notebook, seconds per run (median over --repeats), the CPU model. The README quotes these numbers. A first run as
on a fresh Colab runtime starts from an empty compile cache: `rm -rf /tmp/jaxrl_reason_xla_cache` before it.
--compiles also counts XLA compilations per jitted function and their seconds (JAX's compile log), which is where a
notebook's first run goes when its shapes change from step to step.
"""
import argparse
import collections
import glob
import logging
import os
import re
import platform
import statistics
import time

from jaxrl_reason.experiment.notebooks import execute_in_place, run_notebook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLABS = os.path.join(ROOT, "colabs")
SMOKE_VAR = "JAXRL_REASON_SMOKE"  # the notebooks read it to shrink to the CI size


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class CompileCounter(logging.Handler):
    """Counts JAX's "Finished XLA compilation of NAME in S sec" log lines (jax_log_compiles) per function."""

    PATTERN = re.compile(r"Finished XLA compilation of (.+) in ([0-9.e-]+) sec")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.count, self.seconds = collections.Counter(), collections.defaultdict(float)

    def emit(self, record):
        m = self.PATTERN.search(record.getMessage())
        if m:
            self.count[m.group(1)] += 1
            self.seconds[m.group(1)] += float(m.group(2))

    def table(self, most: int = 8) -> str:
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:most]
        return "| function | compilations | seconds |\n|---|---|---|\n" + "\n".join(
            f"| {name} | {self.count[name]} | {sec:.1f} |" for name, sec in rows)


def watch_compiles() -> CompileCounter:
    import jax

    jax.config.update("jax_log_compiles", True)
    counter = CompileCounter()
    source = logging.getLogger("jax._src.dispatch")  # where the line is logged; not its parents (counted once)
    source.addHandler(counter)
    source.propagate = False  # keep the per-compile lines off the console
    return counter


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help=f"the CI size ({SMOKE_VAR}=1)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--only", help="substring of the notebook names to run")
    p.add_argument("--compiles", action="store_true", help="count XLA compilations per notebook and function")
    p.add_argument("--write", action="store_true", help="write the last run's outputs into the notebook")
    args = p.parse_args(argv)
    if args.smoke:
        os.environ[SMOKE_VAR] = "1"
    else:
        os.environ.pop(SMOKE_VAR, None)
    os.chdir(COLABS)
    rows = []
    for path in sorted(glob.glob(os.path.join(COLABS, "*.ipynb"))):
        name = os.path.basename(path)
        if args.only and args.only not in name:
            continue
        times = []
        counter = watch_compiles() if args.compiles else None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            if args.write:
                execute_in_place(path, "smoke" if args.smoke else "full", cpu_model())
            else:
                run_notebook(path)
            times.append(time.perf_counter() - t0)
        rows.append((name, statistics.median(times), times))
        print(f"{name}: {times}", flush=True)
        if counter is not None:
            logging.getLogger("jax._src.dispatch").removeHandler(counter)
            print(f"\n{name}: {sum(counter.count.values())} compilations, {sum(counter.seconds.values()):.0f} s\n"
                  f"{counter.table()}\n", flush=True)
    print(f"\n{'smoke' if args.smoke else 'full'} size, {os.cpu_count()} cores, {cpu_model()}\n")
    print("| notebook | seconds (median) | runs |\n|---|---|---|")
    for name, med, times in rows:
        print(f"| {name} | {med:.0f} | {', '.join(f'{t:.0f}' for t in times)} |")


if __name__ == "__main__":
    main()
