"""The plots the reports embed: training curves per algorithm, and the cost of each."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, also where one exists
import matplotlib.pyplot as plt  # noqa: E402

CURVES = ("reward_mean", "kl", "val_accuracy")


def read_history(path: Path) -> list[dict]:
    """The rows of a per-step history CSV."""
    with open(path) as fh:
        return list(csv.DictReader(fh))


def mean_over_seeds(histories: list[list[dict]]) -> list[dict]:
    """One history from several (an arm's seeds): each curve's mean over the runs that have it at a step."""
    by_step: dict[int, dict[str, list[float]]] = {}
    for rows in histories:
        for r in rows:
            for key in CURVES:
                if r.get(key) not in ("", None):
                    by_step.setdefault(int(r["step"]), {}).setdefault(key, []).append(float(r[key]))
    return [{"step": step, **{k: sum(v) / len(v) for k, v in by_step[step].items()}} for step in sorted(by_step)]


LABELS = {
    "reward_mean": "mean reward per completion",
    "kl": "KL to the reference (per token)",
    "val_accuracy": "validation accuracy (greedy)",
}
SMOOTHING = 10  # steps in the moving average drawn over the raw per-step points


def moving_average(values: list[float], window: int = SMOOTHING) -> list[float]:
    """Trailing mean of up to ``window`` values ending at each point (the first ones average fewer)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def _points(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in rows if r.get(key) not in ("", None)]


def plot_curves(histories: dict[str, list[dict]], out: Path, starts: dict[str, float | None] | None = None) -> Path:
    """``out/curves.png``: reward and KL per step (the raw points faint, a moving average over
    them) and validation accuracy, one colour per history. ``starts``: each history's validation
    accuracy before training (its reference's), drawn at step 0 so the gain shows."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    colours = dict(zip(histories, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
    for ax, key in zip(axes, CURVES):
        for algo, rows in histories.items():
            pts = _points(rows, key)
            if key == "val_accuracy":
                start = (starts or {}).get(algo)
                pts = ([(0, start)] if start is not None else []) + pts
                if pts:
                    ax.plot(*zip(*pts), marker="o", color=colours[algo], label=algo)
            elif pts:
                steps, values = zip(*pts)
                ax.plot(steps, values, color=colours[algo], alpha=0.25, linewidth=0.8)
                ax.plot(
                    steps, moving_average(list(values)), color=colours[algo], label=f"{algo} ({SMOOTHING}-step mean)"
                )
        ax.set_title(LABELS[key])
        ax.set_xlabel("training step")
        ax.set_ylabel(LABELS[key])
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_bars(summaries: dict[str, dict], out: Path) -> Path:
    """``out/cost.png``: peak memory and seconds per step of each summary."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in zip(axes, ("peak_memory_mb", "seconds_per_step"), ("peak memory (MiB)", "seconds per step")):
        ax.bar(list(summaries), [summaries[a][key] or 0 for a in summaries], color=["tab:blue", "tab:orange"])
        ax.set_title(label)
        ax.set_ylabel(label)
    fig.tight_layout()
    path = out / "cost.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
