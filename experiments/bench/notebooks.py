"""Wall time of each notebook in colabs/, run top to bottom headless at its full (Colab) size or --smoke size.

    python experiments/bench/notebooks.py [--smoke] [--repeats 1]

Uses the runner of tests/test_colabs.py (code cells in order, `!pip` cells skipped). Prints a markdown table:
notebook, seconds per run (median over --repeats), the CPU model. The README quotes these numbers.
"""
import argparse
import glob
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from test_colabs import COLABS, SMOKE_VAR, run_notebook  # noqa: E402


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help=f"the CI size ({SMOKE_VAR}=1)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--only", help="substring of the notebook names to run")
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
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            run_notebook(path)
            times.append(time.perf_counter() - t0)
        rows.append((name, statistics.median(times), times))
        print(f"{name}: {times}", flush=True)
    print(f"\n{'smoke' if args.smoke else 'full'} size, {os.cpu_count()} cores, {cpu_model()}\n")
    print("| notebook | seconds (median) | runs |\n|---|---|---|")
    for name, med, times in rows:
        print(f"| {name} | {med:.0f} | {', '.join(f'{t:.0f}' for t in times)} |")


if __name__ == "__main__":
    main()
