"""Every figure the project draws: training curves from a run's metrics JSONL (against steps, or against a budget
spent, `budget_curves`) and test-time scaling curves.

One module so that the training script (`experiment.report`), `experiments/evaluate.py` and the notebooks in
colabs/ draw the same thing the same way. Each function returns a `matplotlib.figure.Figure` (Jupyter shows a
returned figure inline) and saves a PNG when given `path`.

Figures are built with `matplotlib.figure.Figure`, not `pyplot`: no global backend is selected or changed (a
script renders through Agg, which `savefig` picks for PNG; a notebook keeps its inline backend) and no figure
lingers in pyplot's registry, so a training loop that plots every run leaks nothing.
"""
from __future__ import annotations

import json
import math
import os
from typing import Iterable, Mapping, Optional, Sequence, Union

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["training_curves", "sweep_curves", "budget_curves", "test_time_curves", "read_records", "format_table"]

Records = Union[str, os.PathLike, Sequence[Mapping]]
_TEST_TIME_X = {"k": "samples per question k", "tokens": "tokens spent per question"}


def read_records(metrics: Records) -> list[dict]:
    """Metric records from a JSONL path (or a run's log directory holding metrics.jsonl), or a list of dicts, one
    per step: the records of a step are merged, a key logged twice at its later value (a run resumed before
    `MetricsWriter.forget` existed logged the steps after its last save twice; the later is the step as trained).

    Every record must carry "step": a curve is drawn against it.
    """
    if isinstance(metrics, (str, os.PathLike)):
        path = os.fspath(metrics)
        if os.path.isdir(path):
            path = os.path.join(path, "metrics.jsonl")
        if not os.path.exists(path):
            raise FileNotFoundError(f"metrics: no file {path!r}; pass a run's metrics.jsonl (or its log directory)")
        with open(path, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
    else:
        records = [dict(r) for r in metrics]
    for i, r in enumerate(records):
        if "step" not in r:
            raise ValueError(f"metrics: record {i} has no 'step' (keys: {sorted(r)}); every record needs one")
    by_step: dict = {}
    for r in records:
        by_step.setdefault(r["step"], {}).update(r)
    return list(by_step.values())


def _series(records: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the records that carry `key`, sorted by step; the writer stores non-finite as strings."""
    pairs = sorted((float(r["step"]), float(r[key])) for r in records if key in r)
    if not pairs:
        return np.zeros(0), np.zeros(0)
    steps, values = zip(*pairs)
    return np.asarray(steps), np.asarray(values)


def _trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` values at each point (fewer at the start), so the curve keeps every step."""
    csum = np.cumsum(np.concatenate([[0.0], values]))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (csum[idx] - csum[lo]) / (idx - lo)


def _axes_for(ax, n: int, *, width: float = 4.2, height: float = 3.2) -> list[Axes]:
    if ax is None:
        fig = Figure(figsize=(width * n, height), layout="constrained")
        return list(np.atleast_1d(fig.subplots(1, n, squeeze=False)[0]))
    if isinstance(ax, Axes):
        return [ax] * n
    axes = list(np.ravel(np.asarray(ax, dtype=object)))
    if len(axes) != n or not all(isinstance(a, Axes) for a in axes):
        raise ValueError(f"ax: got {len(axes)} axes for {n} keys; pass one Axes (every key on it) or one per key")
    return axes


def _single_axes(ax) -> Axes:
    """`ax`, or the one Axes of a new figure when None; anything else is an error."""
    if ax is None:
        return Figure(figsize=(6.4, 4.4), layout="constrained").add_subplot()
    if not isinstance(ax, Axes):
        raise ValueError(f"ax: expected one matplotlib Axes, got {type(ax).__name__}")
    return ax


def _finish(ax: Axes, xlabel: str, ylabel: str, title: Optional[str], path) -> Figure:
    """Labels, grid and legend of a one-panel figure; saved when given `path`."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(ax.figure, path)
    return ax.figure


def _save(fig: Figure, path) -> None:
    if path is not None:
        directory = os.path.dirname(os.fspath(path))
        if directory:
            os.makedirs(directory, exist_ok=True)
        fig.savefig(path, dpi=120)


def training_curves(metrics: Records, keys: Union[str, Sequence[str]], *, path=None, ax=None,
                    label: Optional[str] = None, smooth: int = 0, color: Optional[str] = None) -> Figure:
    """Each metric in `keys` against "step".

    metrics: a run's metrics JSONL (or its log directory), or a list of dicts each with "step".
    keys: one name or several. Without `ax`, one panel per key side by side; `ax` may be one Axes (every key
      drawn on it) or one Axes per key, e.g. `fig.axes` of an earlier call, to overlay another run (`label`
      names it in the legend). A key in no record is an error naming the keys present.
    smooth: a trailing-mean window in steps; above 1 the raw curve is drawn faint under the smoothed one.
    color: one matplotlib color for every curve of this run, so a run overlaid on several panels keeps its color
      in each even where other runs lack a panel's key (default: the axes' color cycle).
    """
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        raise ValueError("keys: name at least one metric to plot")
    if not isinstance(smooth, (int, np.integer)) or smooth < 0:
        raise ValueError(f"smooth: expected a window of steps >= 0 (0 or 1 = no smoothing), got {smooth!r}")
    records = read_records(metrics)
    present = sorted({k for r in records for k in r} - {"step"})
    missing = [k for k in keys if k not in present]
    if missing:
        raise KeyError(f"keys: {missing} in no metrics record; the records hold {present}")
    axes = _axes_for(ax, len(keys))
    shared = len(set(map(id, axes))) == 1 and len(keys) > 1
    for key, a in zip(keys, axes):
        steps, values = _series(records, key)
        name = key if label is None else (f"{label}: {key}" if shared else label)
        if smooth > 1 and len(values) > 1:
            raw, = a.plot(steps, values, alpha=0.25, linewidth=1, color=color)
            a.plot(steps, _trailing_mean(values, smooth), color=raw.get_color(),
                   label=f"{name} ({smooth}-step mean)")
        else:
            a.plot(steps, values, marker="o" if len(values) < 12 else None, markersize=3, label=name, color=color)
        a.set_xlabel("step")
        if not shared:
            a.set_title(key, fontsize=10)
        a.grid(True, alpha=0.3)
        if label is not None or shared:
            a.legend(fontsize=8)
    fig = axes[0].figure
    _save(fig, path)
    return fig


def _on_steps(records: list[dict], key: str, steps: np.ndarray) -> np.ndarray:
    """The run's `key` at each of `steps` (NaN where it logged none)."""
    s, v = _series(records, key)
    at = dict(zip(s.tolist(), v.tolist()))
    return np.asarray([at.get(x, np.nan) for x in steps.tolist()])


def sweep_curves(arms: Mapping[str, Sequence[Records]], keys: Union[str, Sequence[str]], *, path=None,
                 ax=None) -> Figure:
    """Each arm of a sweep as its mean over seeds with a band of +- one standard error, one panel per key.

    arms: {arm label: [one run's metrics per seed]} (each a metrics JSONL, a log directory or a list of dicts).
    At each step the mean is over the seeds that logged the key there; the band needs two of them or more.
    A key that no run of an arm logged is an error naming the arm and the keys its runs hold.
    """
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys or not arms:
        raise ValueError("sweep_curves: give at least one arm and one key")
    loaded = {}
    for arm, runs in arms.items():
        if isinstance(runs, (str, os.PathLike)) or not len(runs):
            raise ValueError(f"arms[{arm!r}]: expected a list of runs (one per seed), got {runs!r}")
        loaded[arm] = [read_records(r) for r in runs]
        present = sorted({k for recs in loaded[arm] for r in recs for k in r} - {"step"})
        missing = [k for k in keys if k not in present]
        if missing:
            raise KeyError(f"arms[{arm!r}]: keys {missing} in no run; its runs hold {present}")
    axes = _axes_for(ax, len(keys))
    for key, a in zip(keys, axes):
        for arm, runs in loaded.items():
            steps = np.asarray(sorted({float(r["step"]) for recs in runs for r in recs if key in r}))
            ys = np.stack([_on_steps(recs, key, steps) for recs in runs])  # [seeds, steps], NaN = not logged
            n = np.sum(~np.isnan(ys), axis=0)
            mean = np.nansum(ys, axis=0) / n
            line, = a.plot(steps, mean, marker="o" if len(steps) < 12 else None, markersize=3,
                           label=f"{arm} (n={len(runs)})")
            if (n > 1).any():
                dev = np.nansum((ys - mean) ** 2, axis=0)
                se = np.where(n > 1, np.sqrt(dev / np.maximum(n - 1, 1)) / np.sqrt(n), np.nan)
                a.fill_between(steps, mean - se, mean + se, color=line.get_color(), alpha=0.2, linewidth=0)
        a.set_xlabel("step")
        a.set_title(key, fontsize=10)
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    fig = axes[0].figure
    _save(fig, path)
    return fig


def budget_curves(arms: Mapping[str, Sequence[Mapping]], *, path=None, ax=None, points: int = 50,
                  title: Optional[str] = None, xlabel: str = "tokens generated in training",
                  ylabel: str = "held-out accuracy") -> Figure:
    """Each arm's metric against a spent budget (tokens, seconds), mean over seeds with a +- one standard error
    band, on a linear axis; each seed's curve is interpolated onto a grid up to the smallest budget every seed of
    the arm reached, so every point of the mean averages all seeds.

    arms: {arm label: [{"x": [budget values, increasing], "y": [metric values]} per seed]}.
    """
    if not arms:
        raise ValueError("budget_curves: give at least one arm")
    ax = _single_axes(ax)
    for arm, runs in arms.items():
        if not runs:
            raise ValueError(f"arms[{arm!r}]: no runs")
        xs = [np.asarray(r["x"], float) for r in runs]
        ys = [np.asarray(r["y"], float) for r in runs]
        for i, (x, y) in enumerate(zip(xs, ys)):
            if x.shape != y.shape or x.ndim != 1 or len(x) < 2 or np.any(np.diff(x) < 0):
                raise ValueError(f"arms[{arm!r}][{i}]: need 'x' increasing and 'y' of the same length >= 2, got "
                                 f"{x.shape} and {y.shape}")
        grid = np.linspace(max(x[0] for x in xs), min(x[-1] for x in xs), points)
        on = np.stack([np.interp(grid, x, y) for x, y in zip(xs, ys)])
        mean = on.mean(0)
        line, = ax.plot(grid, mean, label=f"{arm} (n={len(runs)})")
        if len(runs) > 1:
            se = on.std(0, ddof=1) / np.sqrt(len(runs))
            ax.fill_between(grid, mean - se, mean + se, color=line.get_color(), alpha=0.2, linewidth=0)
    return _finish(ax, xlabel, ylabel, title, path)


def _points(name: str, points: Iterable[Mapping], x: str) -> dict[str, np.ndarray]:
    points = sorted(points, key=lambda p: p.get(x, math.nan) if isinstance(p, Mapping) else math.nan)
    if not points:
        raise ValueError(f"curves[{name!r}]: no points")
    for i, p in enumerate(points):
        if not isinstance(p, Mapping) or x not in p or "acc" not in p:
            keys = sorted(p) if isinstance(p, Mapping) else type(p).__name__
            raise ValueError(f"curves[{name!r}][{i}]: each point needs {x!r} and 'acc' (got {keys})")
        if ("lo" in p) != ("hi" in p):
            raise ValueError(f"curves[{name!r}][{i}]: give both 'lo' and 'hi' for an error band, or neither")
    out = {"x": np.asarray([float(p[x]) for p in points]), "acc": np.asarray([float(p["acc"]) for p in points])}
    with_band = ["lo" in p for p in points]
    if any(with_band) and not all(with_band):
        raise ValueError(f"curves[{name!r}]: 'lo'/'hi' on some points only; give a band on every point or none")
    if all(with_band):
        out["lo"] = np.asarray([float(p["lo"]) for p in points])
        out["hi"] = np.asarray([float(p["hi"]) for p in points])
    return out


def test_time_curves(curves: Mapping[str, Sequence[Mapping]], *, x: str = "k", path=None, ax=None,
                     title: Optional[str] = None, ylabel: str = "accuracy") -> Figure:
    """Accuracy against samples (x="k") or tokens spent (x="tokens") per question, one line per strategy.

    curves: {strategy name: [{x: value, "acc": float, optionally "lo" and "hi"}, ...]}; lo/hi draw a band.
    The x axis is log-2 (k doubles in the usual sweep) with the values present as ticks when x="k".
    """
    if x not in _TEST_TIME_X:
        raise ValueError(f"x: expected one of {sorted(_TEST_TIME_X)}, got {x!r}")
    if not curves:
        raise ValueError("curves: no strategies to plot")
    ax = _single_axes(ax)
    xs_all = set()
    for name, pts in curves.items():
        p = _points(name, pts, x)
        if (p["x"] <= 0).any():
            raise ValueError(f"curves[{name!r}]: {x} must be > 0 on a log axis, got {p['x'].min()}")
        xs_all.update(p["x"].tolist())
        line, = ax.plot(p["x"], p["acc"], marker="o", markersize=4, label=name)
        if "lo" in p:
            ax.fill_between(p["x"], p["lo"], p["hi"], color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    if x == "k":
        ticks = sorted(xs_all)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.minorticks_off()
    return _finish(ax, _TEST_TIME_X[x], ylabel, title, path)


# The name starts with "test_": a test module that imports it must not have pytest collect it as a test.
test_time_curves.__test__ = False


def strategy_budget_curves(arms: Mapping[str, Mapping[str, Sequence[Mapping]]], *, path=None, ax=None) -> Figure:
    """Every test-time strategy's accuracy against the tokens it generated per question, one panel per arm (the
    median over seeds at each matched budget: `experiment.compare.strategy_budgets`'s "table", {arm: {strategy:
    [{"acc", "tokens"}]}}); a budget no setting fits is left out."""
    if not arms:
        raise ValueError("arms: no arm to plot")
    axes = _axes_for(ax, len(arms), width=5.2, height=3.8)
    for a, (arm, strategies) in zip(axes, arms.items()):
        curves = {name: [{"tokens": p["tokens"], "acc": p["acc"]} for p in pts
                         if p["acc"] is not None and p["tokens"]] for name, pts in strategies.items()}
        curves = {name: pts for name, pts in curves.items() if pts}
        if not curves:
            raise ValueError(f"arms[{arm!r}]: no strategy has a point within any budget")
        test_time_curves(curves, x="tokens", ax=a, title=arm)
    fig = axes[0].figure
    if path is not None:
        _save(fig, path)
    return fig


def format_table(rows: Sequence[Mapping], columns: Sequence[str], *, digits: int = 3) -> str:
    """A markdown table of `rows` in the order of `columns` (floats rounded); a missing column is an error."""
    for i, r in enumerate(rows):
        missing = [c for c in columns if c not in r]
        if missing:
            raise KeyError(f"rows[{i}]: no column {missing}; it holds {sorted(r)}")

    def cell(v):
        return f"{v:.{digits}f}" if isinstance(v, (float, np.floating)) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
