"""Every notebook in colabs/ runs top to bottom headless, in its small CI size (JAXRL_REASON_SMOKE=1), and its
final cell produces the figure and table it promises; the two that compare arms must show arms that differ.

The exec loop is the whole runner: code cells run in order in one namespace, `!` shell cells (the Colab install)
are skipped, and the last statement of the last cell is evaluated as Jupyter would display it. Nothing beyond the
package's own dependencies is needed (no nbformat / nbclient / kernel).
"""
import glob
import json
import os
from typing import NamedTuple

import numpy as np
import pytest

COLABS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "colabs")
NOTEBOOKS = sorted(glob.glob(os.path.join(COLABS, "*.ipynb")))
from jaxrl_reason.experiment.perf import SMOKE_VAR, run_notebook  # noqa: E402  (the runner the notebook bench uses)


class Expect(NamedTuple):
    columns: tuple  # the columns of the notebook's `table` (a list of dicts)
    panels: tuple  # titles the final figure's panels include
    labels: tuple  # legend labels the figure's curves include (a label may add a suffix, e.g. " (n=3)")
    differ: tuple  # panels in which the curves of any two arms must differ (identical arms = a broken notebook)


EXPECT = {
    "01_quickstart.ipynb": Expect(("sample", "temperature", "top_p", "tokens", "correct", "p_yes"), ("p_yes",),
                                  (), ()),
    "02_compose_losses.ipynb": Expect(("method", "terms", "steps", "reward/mean", "loss/total", "seconds"),
                                      ("reward/mean", "loss/pg", "loss/verify", "loss/critique", "loss/total"),
                                      ("GRPO", "GRPO^V", "CURE", "CURE^V"),
                                      # Not reward/mean: at the CI size (3 steps at lr 1e-4 from one warm-up and
                                      # one key) two arms may sample the same rewards (CURE and CURE^V did, on jax
                                      # 0.10.2, though CURE^V trained 10-14 verify rows a step); losses differ.
                                      ("loss/pg", "loss/verify", "loss/critique", "loss/total")),
    "03_test_time_scaling.ipynb": Expect(("strategy", "k", "tokens", "acc", "lo", "hi"), (),
                                         ("majority", "best_of_n", "weighted", "self_refine"), ()),
    # The verifier's balanced accuracy may sit at chance in every arm of a short run (that is a finding, not a
    # bug); the reward and the gradient norm (the cold verify term dominates it when lambda > 0) must differ.
    "04_ablation_sweep.ipynb": Expect(("lambda", "seeds", "reward/mean", "grad_norm", "verify/balanced_acc"),
                                      ("reward/mean", "grad_norm", "verify/balanced_acc"),
                                      ("lambda=0", "lambda=1"), ("reward/mean", "grad_norm")),
}


def read_cells(path):
    return json.load(open(path, encoding="utf-8"))["cells"]



def test_every_notebook_has_expectations():
    assert sorted(os.path.basename(p) for p in NOTEBOOKS) == sorted(EXPECT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_stripped_with_purpose_and_install(path):
    cells = read_cells(path)
    first = "".join(cells[0]["source"]).strip().splitlines()
    assert cells[0]["cell_type"] == "markdown" and first[0].startswith("# ") and len(first) > 1, \
        "the first cell is a markdown title followed by the one-line purpose"
    code = [c for c in cells if c["cell_type"] == "code"]
    assert "".join(code[0]["source"]).lstrip().startswith("!pip install"), "the first code cell installs the package"
    for c in code:
        assert c["outputs"] == [] and c["execution_count"] is None, "outputs must be stripped in the repository"
    assert SMOKE_VAR in "".join("".join(c["source"]) for c in code), f"the notebook reads {SMOKE_VAR} to shrink"


def _arm_curves(ax):
    """{label: y data} of a panel's lines that carry a legend label (faint raw curves are unlabelled)."""
    return {l.get_label(): np.asarray(l.get_ydata(), float) for l in ax.lines if not l.get_label().startswith("_")}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, monkeypatch):
    from matplotlib.figure import Figure

    monkeypatch.setenv(SMOKE_VAR, "1")
    monkeypatch.chdir(COLABS)
    ns, fig, seconds = run_notebook(path)
    expect = EXPECT[os.path.basename(path)]
    rows = ns["table"]
    assert rows and all(set(expect.columns) <= set(r) for r in rows), \
        f"table columns: expected {expect.columns}, got {sorted(rows[0]) if rows else None}"
    assert isinstance(fig, Figure), f"the final cell shows a matplotlib Figure, got {type(fig).__name__}"
    if "loss_table" in ns:  # 04's policy-loss sweep: one row per loss, and no two losses train alike
        assert [r["policy_loss"] for r in ns["loss_table"]] == list(ns["LOSSES"])
        grad = _arm_curves(next(ax for ax in ns["loss_fig"].axes if ax.get_title() == "grad_norm"))
        assert len(grad) == len(ns["LOSSES"])
        for a in grad:
            for b in grad:
                assert a == b or not np.array_equal(grad[a], grad[b]), f"losses {a} and {b} drew the same grad_norm"
    titles = [ax.get_title() for ax in fig.axes]
    assert set(expect.panels) <= set(titles), f"panels: expected {expect.panels}, got {titles}"
    assert all(ax.lines for ax in fig.axes), "every panel draws at least one curve"
    drawn = {l.get_label() for ax in fig.axes for l in ax.lines}
    for label in expect.labels:
        assert any(d == label or d.startswith(label + " ") for d in drawn), f"no curve {label!r} in {sorted(drawn)}"
    if expect.differ:
        compared = 0
        for ax in fig.axes:
            if ax.get_title() not in expect.differ:
                continue
            curves = _arm_curves(ax)
            names = sorted(curves)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    compared += 1
                    # exact: a broken notebook (two arms running one program) draws bit-identical curves, while a
                    # real extra term may move a loss by only ~1e-7 in 3 steps at lr 1e-4 (CURE^V's critique loss)
                    same = curves[a].shape == curves[b].shape and np.array_equal(curves[a], curves[b], equal_nan=True)
                    assert not same, f"panel {ax.get_title()!r}: arms {a!r} and {b!r} drew the same curve"
        assert compared, "no panel holds two arms to compare"
