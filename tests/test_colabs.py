"""Every notebook in colabs/ runs top to bottom (code cells executed in order in one namespace)."""
import glob
import json
import os

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "colabs", "*.ipynb")))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path):
    cells = json.load(open(path))["cells"]
    ns = {"__name__": "__main__"}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        if src.lstrip().startswith("!"):
            continue  # shell installs are for Colab, not for CI
        exec(compile(src, f"{os.path.basename(path)}[cell {i}]", "exec"), ns)
    assert NOTEBOOKS
