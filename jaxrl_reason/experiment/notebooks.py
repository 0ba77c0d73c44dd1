"""Run a notebook's code cells headless, and write what they printed and drew back into the notebook.

One runner serves three callers: CI (`tests/test_colabs.py` re-executes every notebook in `colabs/` and reads its
namespace; it never writes), the timing script (`experiments/bench/notebooks.py`), and committing a notebook
executed (`experiments/bench/notebooks.py --write`, which calls `execute_in_place`). Code cells run in order in one
namespace, `!` shell cells (the Colab install) are skipped, and the value of a cell's last expression is kept as
Jupyter would display it. Nothing beyond the package's own dependencies is needed (no nbformat, nbclient or kernel):
a notebook is JSON, and its outputs are the few nbformat-4 records written below.
"""
from __future__ import annotations

import ast
import base64
import contextlib
import datetime
import io
import json
import os
import platform
import time
from typing import Any, NamedTuple

# What a committed notebook may carry: text and one PNG per figure (no HTML, widget state or error tracebacks).
OUTPUT_TYPES = ("stream", "execute_result", "display_data")
MIME_TYPES = ("text/plain", "image/png")
FIGURE_DPI = 72  # ~1000 px for the widest figure (02's five panels): readable, and the notebooks stay small


class CellRun(NamedTuple):
    index: int  # the cell's position among all the notebook's cells
    seconds: float
    stdout: str  # "" unless run with capture=True
    value: Any  # the value of the cell's last expression; None when it ends in a statement


def read_notebook(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def is_shell_cell(cell: dict) -> bool:
    return "".join(cell["source"]).lstrip().startswith("!")


def run_notebook(path: str, capture: bool = False) -> tuple[dict, list[CellRun]]:
    """Runs the code cells of `path` in order; (namespace, one CellRun per code cell that ran). Reads the file only:
    the outputs a notebook is committed with are ignored, and nothing is written back."""
    cells = read_notebook(path)["cells"]
    ns = {"__name__": "__main__"}
    runs = []
    name = os.path.basename(path)
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or is_shell_cell(cell):
            continue  # shell installs are for Colab, not for a headless run
        tree = ast.parse("".join(cell["source"]))
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
            exec(compile(tree, f"{name}[cell {i}]", "exec"), ns)
            value = eval(compile(ast.Expression(last.value), f"{name}[cell {i}]", "eval"), ns) if last else None
        runs.append(CellRun(i, time.perf_counter() - t0, out.getvalue(), value))
    return ns, runs


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def small_png(png: bytes) -> bytes:
    """The PNG in a 256-colour palette: a plot's flat colours survive, and the file is ~3x smaller than RGBA."""
    from PIL import Image  # matplotlib's own dependency

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256).save(out, format="PNG", optimize=True)
    return out.getvalue()


def _display(value: Any, count: int) -> dict:
    """The execute_result Jupyter shows for a cell's value: a matplotlib figure as one PNG, anything else as text."""
    data = {"text/plain": _lines(repr(value))}
    if hasattr(value, "savefig"):
        buf = io.BytesIO()
        value.savefig(buf, format="png", dpi=FIGURE_DPI)
        data["image/png"] = base64.b64encode(small_png(buf.getvalue())).decode("ascii")
    return {"output_type": "execute_result", "execution_count": count, "data": data, "metadata": {}}


def cell_outputs(run: CellRun, count: int) -> list[dict]:
    # stdout only: stderr carries progress bars and library deprecation warnings (with the writer's install paths),
    # which say more about the machine that ran it than about the notebook; they still reach the writer's console
    outputs = [{"output_type": "stream", "name": "stdout", "text": _lines(run.stdout)}] if run.stdout else []
    if run.value is not None:
        outputs.append(_display(run.value, count))
    return outputs


def strip_outputs(nb: dict) -> dict:
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    nb["metadata"].pop("jaxrl_reason", None)
    return nb


def execute_in_place(path: str, size: str, cpu: str = "") -> float:
    """Runs `path` and rewrites it with each cell's printed text and figure; returns the seconds the cells took.

    `size` names the size it ran at ("full" or "smoke", recorded in the notebook's metadata with the date, the
    seconds and the CPU, so that a reader knows what produced the outputs). The file is written only after every
    cell ran: a cell that raises leaves it as it was."""
    import jax  # the run's JAX version goes into the record; importing it here keeps the module light for CI

    nb = read_notebook(path)
    _, runs = run_notebook(path, capture=True)
    strip_outputs(nb)
    for count, run in enumerate(runs, start=1):
        cell = nb["cells"][run.index]
        cell["execution_count"], cell["outputs"] = count, cell_outputs(run, count)
    seconds = sum(r.seconds for r in runs)
    nb["metadata"]["jaxrl_reason"] = {
        "executed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "size": size,
        "seconds": round(seconds), "cpu": f"{os.cpu_count()} cores, {cpu or platform.processor() or 'unknown'}",
        "jax": jax.__version__}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return seconds
