"""What a finished run shows: the before/after table and the reward/accuracy plot."""
from __future__ import annotations

from jaxrl_reason.experiment.config import RunConfig


def plot_curves(history_path: str, out_png: str, before: float, after: float) -> None:
    """Per-step train reward (raw and smoothed), periodic held-out accuracy, and the before/after lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxrl_reason.train.metrics import read_metrics

    rows = [r for r in read_metrics(history_path) if "reward/mean" in r]
    if not rows:
        return
    steps = np.array([r["step"] for r in rows])
    reward = np.array([r["reward/mean"] for r in rows])
    k = max(1, len(rows) // 20)
    smooth = np.convolve(reward, np.ones(k) / k, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, reward, alpha=0.3, label="train reward (per step)")
    ax.plot(steps[k - 1:], smooth, label=f"train reward ({k}-step mean)")
    ax.axhline(before, color="gray", ls="--", label=f"held-out acc. before RL ({before:.1%})")
    ax.axhline(after, color="green", ls="--", label=f"held-out acc. after RL ({after:.1%})")
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out accuracy")
    ax.set_xlabel("RL step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)


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
