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


def plot_curves(histories: dict[str, list[dict]], out: Path) -> Path:
    """``out/curves.png``: reward, KL and validation accuracy per step, one line per history."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, key in zip(axes, CURVES):
        for algo, rows in histories.items():
            pts = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) not in ("", None)]
            if pts:
                ax.plot(*zip(*pts), marker="o" if key == "val_accuracy" else None, label=algo)
        ax.set_title(key)
        ax.set_xlabel("step")
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
    fig.tight_layout()
    path = out / "cost.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
