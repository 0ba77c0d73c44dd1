"""experiment.plots: training curves from metrics JSONL, test-time curves, and the run report's PNG."""
import json

import numpy as np
import pytest
from matplotlib.figure import Figure

from jaxrl_reason.experiment import plots
from jaxrl_reason.experiment.report import plot_curves
from jaxrl_reason.train.metrics import MetricsWriter


def _records(n=10, seed=0):
    rng = np.random.default_rng(seed)
    out = [{"step": s, "reward/mean": float(rng.random()), "loss/pg": float(-s)} for s in range(n)]
    out[3]["eval/accuracy"] = 0.25
    out[7]["eval/accuracy"] = 0.5
    return out


def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    return data


def test_training_curves_reads_the_writer_jsonl_and_saves_png(tmp_path):
    w = MetricsWriter(str(tmp_path / "logs"), tensorboard=False)
    for r in _records():
        w.write(r["step"], {k: v for k, v in r.items() if k != "step"})
    w.close()
    fig = plots.training_curves(tmp_path / "logs" / "metrics.jsonl", ["reward/mean", "eval/accuracy"],
                                path=tmp_path / "out" / "curve.png")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    _png(tmp_path / "out" / "curve.png")
    # eval/accuracy is logged at two steps only: its curve has those two points, not ten
    steps, acc = fig.axes[1].lines[0].get_data()
    np.testing.assert_array_equal(steps, [3, 7])
    np.testing.assert_array_equal(acc, [0.25, 0.5])
    # the log directory works too, and gives the same data
    fig2 = plots.training_curves(tmp_path / "logs", "reward/mean")
    np.testing.assert_array_equal(fig2.axes[0].lines[0].get_ydata(), fig.axes[0].lines[0].get_ydata())


def test_training_curves_missing_key_names_the_keys_present():
    with pytest.raises(KeyError, match=r"loss/verify.*eval/accuracy.*loss/pg.*reward/mean"):
        plots.training_curves(_records(), ["reward/mean", "loss/verify"])
    with pytest.raises(ValueError, match="step"):
        plots.training_curves([{"reward/mean": 1.0}], "reward/mean")


def test_training_curves_smooth_is_a_trailing_mean_and_overlays_on_given_axes():
    recs = _records(8)
    fig = plots.training_curves(recs, ["reward/mean", "loss/pg"], smooth=3, label="A")
    raw, smoothed = fig.axes[0].lines
    r = np.array([x["reward/mean"] for x in recs])
    expect = [r[max(0, i - 2):i + 1].mean() for i in range(len(r))]
    np.testing.assert_allclose(smoothed.get_ydata(), expect)
    np.testing.assert_array_equal(raw.get_ydata(), r)
    # a second run drawn onto the same panels: each panel now holds both runs, labelled
    other = [dict(x, **{"loss/pg": 2.0 * x["loss/pg"]}) for x in recs]
    same = plots.training_curves(other, ["reward/mean", "loss/pg"], ax=fig.axes, label="B", smooth=3)
    assert same is fig and len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["A (3-step mean)", "B (3-step mean)"]
    # a fixed color keeps a run recognisable on every panel it is drawn on
    fig3 = plots.training_curves(recs, ["reward/mean", "loss/pg"], color="red")
    assert {l.get_color() for a in fig3.axes for l in a.lines} == {"red"}
    with pytest.raises(ValueError, match="one per key"):
        plots.training_curves(recs, ["reward/mean", "loss/pg"], ax=fig.axes[:1])
    with pytest.raises(ValueError, match="smooth"):
        plots.training_curves(recs, "loss/pg", smooth=-1)


def test_training_curves_reads_non_finite_values_the_writer_stores_as_strings(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"step": 0, "x": 1.0}, {"step": 1, "x": "nan"}]) + "\n")
    fig = plots.training_curves(path, "x")
    y = fig.axes[0].lines[0].get_ydata()
    assert y[0] == 1.0 and np.isnan(y[1])


def test_training_curves_draw_a_step_logged_twice_once_at_its_later_value():
    """A run resumed before the writer forgot the steps after its last save logged them twice; the later one is the
    step as trained again."""
    records = [{"step": 1, "x": 1.0}, {"step": 2, "x": 2.0}, {"step": 3, "x": 9.0}, {"step": 2, "x": 2.5},
               {"step": 3, "x": 3.0}, {"step": 4, "x": 4.0}]
    steps, y = plots.training_curves(records, "x").axes[0].lines[0].get_data()
    np.testing.assert_array_equal(steps, [1, 2, 3, 4])
    np.testing.assert_array_equal(y, [1.0, 2.5, 3.0, 4.0])


def test_test_time_curves_draws_lines_and_bands(tmp_path):
    curves = {
        "majority": [{"k": 4, "acc": 0.5, "lo": 0.4, "hi": 0.6}, {"k": 1, "acc": 0.3, "lo": 0.2, "hi": 0.4}],
        "best_of_n": [{"k": 1, "acc": 0.3}, {"k": 4, "acc": 0.6}],
    }
    fig = plots.test_time_curves(curves, path=tmp_path / "tt.png", title="t")
    _png(tmp_path / "tt.png")
    ax = fig.axes[0]
    assert [l.get_label() for l in ax.lines] == ["majority", "best_of_n"]
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), [1, 4])  # points sorted by x
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [0.3, 0.5])
    assert len(ax.collections) == 1  # one band: only majority gave lo/hi
    assert ax.get_xscale() == "log" and ax.get_title() == "t"
    fig = plots.test_time_curves({"w": [{"tokens": 100, "acc": 0.1}, {"tokens": 400, "acc": 0.2}]}, x="tokens")
    assert "tokens" in fig.axes[0].get_xlabel()


@pytest.mark.parametrize("curves,x,match", [
    ({"m": [{"k": 1}]}, "k", "'acc'"),
    ({"m": [{"k": 1, "acc": 0.1, "lo": 0.0}]}, "k", "both 'lo' and 'hi'"),
    ({"m": [{"k": 1, "acc": 0.1, "lo": 0, "hi": 1}, {"k": 2, "acc": 0.2}]}, "k", "some points only"),
    ({"m": [{"k": 0, "acc": 0.1}]}, "k", "> 0"),
    ({"m": [{"k": 1, "acc": 0.1}]}, "tokens", "'tokens'"),
    ({"m": [{"k": 1, "acc": 0.1}]}, "samples", "one of"),
    ({}, "k", "no strategies"),
])
def test_test_time_curves_refuses_bad_points(curves, x, match):
    with pytest.raises(ValueError, match=match):
        plots.test_time_curves(curves, x=x)


def test_report_plot_curves_saves_the_run_png_through_plots(tmp_path):
    w = MetricsWriter(str(tmp_path / "logs"), tensorboard=False)
    for r in _records(30):
        w.write(r["step"], {k: v for k, v in r.items() if k != "step"})
    w.close()
    plot_curves(str(tmp_path / "logs"), str(tmp_path / "rl_curve.png"), before=0.1, after=0.4)
    _png(tmp_path / "rl_curve.png")
    # a run that logged no reward (e.g. zero RL steps) writes no plot rather than failing the run's report
    (tmp_path / "empty").mkdir()
    plot_curves(str(tmp_path / "empty"), str(tmp_path / "none.png"), before=0.1, after=0.1)
    assert not (tmp_path / "none.png").exists()


def test_format_table():
    t = plots.format_table([{"a": 1, "b": 0.12345}], ["b", "a"])
    assert t.splitlines() == ["| b | a |", "|---|---|", "| 0.123 | 1 |"]
    with pytest.raises(KeyError, match="'c'"):
        plots.format_table([{"a": 1}], ["a", "c"])


def test_sweep_curves_mean_and_standard_error_over_seeds():
    seeds = [[{"step": s, "r": float(s + i)} for s in range(1, 4)] for i in range(3)]  # seed i: r = step + i
    single = [[{"step": s, "r": 10.0} for s in range(1, 4)]]
    fig = plots.sweep_curves({"a": seeds, "b": single}, ["r"])
    ax = fig.axes[0]
    a, b = ax.lines
    assert a.get_label() == "a (n=3)" and b.get_label() == "b (n=1)"
    np.testing.assert_allclose(a.get_ydata(), [2.0, 3.0, 4.0])  # mean of step + {0, 1, 2}
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    se = 1.0 / np.sqrt(3)  # std (ddof 1) of {0, 1, 2} is 1
    np.testing.assert_allclose([band.min(), band.max()], [2.0 - se, 4.0 + se])
    assert len(ax.collections) == 1  # one seed draws no band
    with pytest.raises(KeyError, match=r"arms\['b'\].*'r'"):
        plots.sweep_curves({"a": seeds, "b": [[{"step": 1, "x": 0.0}]]}, "r")
    with pytest.raises(ValueError, match="one per seed"):
        plots.sweep_curves({"a": "runs/x/metrics.jsonl"}, "r")


def test_budget_curves_average_seeds_on_a_common_grid():
    from jaxrl_reason.experiment.plots import budget_curves

    # two seeds of one arm reach different budgets: the mean runs to the smaller one and averages both
    runs = [{"x": [0, 100, 200], "y": [0.1, 0.5, 0.9]}, {"x": [0, 150], "y": [0.3, 0.6]}]
    fig = budget_curves({"a": runs, "b": [{"x": [0, 50], "y": [0.2, 0.2]}]}, points=4)
    lines = {l.get_label(): l for l in fig.axes[0].lines}
    a = lines["a (n=2)"]
    np.testing.assert_allclose(a.get_xdata(), [0, 50, 100, 150])
    np.testing.assert_allclose(a.get_ydata(), [(0.1 + 0.3) / 2, (0.3 + 0.4) / 2, (0.5 + 0.5) / 2, (0.7 + 0.6) / 2])
    assert len(fig.axes[0].collections) == 1  # a band for the arm with two seeds only
    with pytest.raises(ValueError, match="increasing"):
        budget_curves({"a": [{"x": [2, 1], "y": [0, 1]}]})
