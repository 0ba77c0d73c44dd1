"""What a finished run shows: the before/after table and the reward/accuracy plot."""
from __future__ import annotations

from jaxrl_reason.experiment.config import RunConfig
from jaxrl_reason.experiment.plots import training_curves
from jaxrl_reason.train.metrics import read_metrics


def plot_curves(history_path: str, out_png: str, before: float, after: float) -> None:
    """Per-step train reward (raw and smoothed), periodic held-out accuracy, and the before/after lines.

    `history_path` is the run's log directory; a run that logged no reward (or nothing) writes no plot.
    """
    records = [r for r in read_metrics(history_path) if "reward/mean" in r]
    if not records:
        return
    k = max(1, len(records) // 20)
    fig = training_curves(records, "reward/mean", label="train reward", smooth=k)
    ax = fig.axes[0]
    evals = [r for r in records if "eval/accuracy" in r]
    if evals:
        training_curves(evals, "eval/accuracy", ax=ax, label="held-out accuracy")
    ax.axhline(before, color="gray", ls="--", label=f"held-out acc. before RL ({before:.1%})")
    ax.axhline(after, color="green", ls="--", label=f"held-out acc. after RL ({after:.1%})")
    ax.set_title("")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    fig.set_size_inches(7, 4)
    fig.savefig(out_png, dpi=120)


def results_table(results: dict, rc: RunConfig) -> str:
    """The held-out before/after table of a run's results.json (markdown)."""
    b, a = results["before"], results["after"]
    before_label = "before RL (after SFT warm-up)" if rc.sft.steps > 0 else "before RL"
    return "\n".join([
        f"| held-out ({b['num_examples']} problems) | accuracy | mean length | finished |",
        "|---|---|---|---|",
        f"| {before_label} | {b['accuracy']:.1%} | {b['mean_length']:.1f} | {b['finished_frac']:.0%} |",
        f"| after {rc.rl.steps} RL steps ({rc.method.name}/{rc.method.estimator}) | {a['accuracy']:.1%} | "
        f"{a['mean_length']:.1f} | {a['finished_frac']:.0%} |"])
