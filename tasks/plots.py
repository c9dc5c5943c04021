"""The plots the reports embed: training curves per algorithm, the cost of each, and validation
accuracy against wall-clock time."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, also where one exists
import matplotlib.pyplot as plt  # noqa: E402

CURVES = ("reward_mean", "kl", "group_reward_std", "val_accuracy")


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


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` and free it (pyplot keeps every open figure)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


LABELS = {
    "reward_mean": "mean reward per completion",
    "kl": "KL to the reference (per token)",
    "group_reward_std": "reward std within a prompt's group",
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
    """``out/curves.png``: reward, KL and the reward's spread within a prompt's group per step (the
    raw points faint, a moving average over them) and validation accuracy, one colour per history.
    ``starts``: each history's validation accuracy before training (its reference's), drawn at step
    0 so the gain shows."""
    fig, axes = plt.subplots(1, len(CURVES), figsize=(18, 4))
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
    return _save(fig, out / "curves.png")


def plot_bars(summaries: dict[str, dict], out: Path) -> Path:
    """``out/cost.png``: peak memory and seconds per step of each summary."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in zip(axes, ("peak_memory_mb", "seconds_per_step"), ("peak memory (MiB)", "seconds per step")):
        ax.bar(list(summaries), [summaries[a][key] or 0 for a in summaries], color=["tab:blue", "tab:orange"])
        ax.set_title(label)
        ax.set_ylabel(label)
    return _save(fig, out / "cost.png")


def plot_memory(arms: dict[str, dict], parts: tuple[str, ...], out: Path) -> Path:
    """``out/memory.png``: each arm's peak memory as one stacked bar of ``parts`` (MiB each,
    :func:`grpoflow.evaluation.compare.arm_memory`); a note in place of the bars where there are none."""
    fig, ax = plt.subplots(figsize=(7, 4))
    bottoms = [0.0] * len(arms)
    for part in parts:
        values = [max(arms[a][part], 0.0) for a in arms]  # a part measured below zero (noise) draws nothing
        ax.bar(list(arms), values, bottom=bottoms, label=part.removesuffix("_mb"))
        bottoms = [b + v for b, v in zip(bottoms, values)]
    if not arms:
        ax.text(0.5, 0.5, "no run with a critic: no breakdown", ha="center", va="center", transform=ax.transAxes)
    ax.set_title("where the peak memory goes")
    ax.set_ylabel("MiB at the peak")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, out / "memory.png")


# A step's whole wall time (rollout to checkpoint, evaluation included); older histories have only
# the step's own seconds.
WALL_KEYS = ("phase/wall_s", "step_seconds")


def _wall(row: dict) -> float:
    for key in WALL_KEYS:
        if row.get(key) not in ("", None):
            return float(row[key])
    return 0.0


def accuracy_by_wall_clock(runs: list[list[dict]], start: float | None = None) -> list[tuple[float, float, float]]:
    """One arm's validation accuracy against the wall-clock seconds its training had spent, over its
    seeds: at each step where every seed evaluated, (mean seconds so far, mean accuracy, std of the
    accuracy over the seeds; 0 for one seed). Seconds count every row, a critic's warm-up steps
    included: they are the arm's cost. ``start``: the reference's accuracy, drawn at 0 s."""
    points: dict[int, list[tuple[float, float]]] = {}
    for rows in runs:
        elapsed = 0.0
        for r in rows:
            elapsed += _wall(r)
            if r.get("val_accuracy") not in ("", None):
                points.setdefault(int(r["step"]), []).append((elapsed, float(r["val_accuracy"])))
    curve = [(0.0, start, 0.0)] if start is not None else []
    for step in sorted(points):
        if len(points[step]) == len(runs):  # a step some seeds never reached would mix arms of unequal length
            seconds, accuracy = zip(*points[step])
            spread = statistics.stdev(accuracy) if len(accuracy) > 1 else 0.0
            curve.append((statistics.fmean(seconds), statistics.fmean(accuracy), spread))
    return curve


def plot_accuracy_by_wall_clock(
    histories: dict[str, list[list[dict]]], out: Path, starts: dict[str, float | None] | None = None
) -> Path:
    """``out/wall_clock.png``: each arm's validation accuracy (mean over its seeds, a band of ± one
    standard deviation) against the wall-clock minutes of training: what a gain costs."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for arm, runs in histories.items():
        curve = accuracy_by_wall_clock(runs, (starts or {}).get(arm))
        if not curve:
            continue
        minutes = [s / 60 for s, _, _ in curve]
        mean = [a for _, a, _ in curve]
        (line,) = ax.plot(minutes, mean, marker="o", label=f"{arm} ({len(runs)} seed{'s' if len(runs) != 1 else ''})")
        low, high = [a - d for _, a, d in curve], [a + d for _, a, d in curve]
        ax.fill_between(minutes, low, high, color=line.get_color(), alpha=0.2)
    ax.set_title("validation accuracy against training time")
    ax.set_xlabel("wall-clock minutes of training (mean over seeds)")
    ax.set_ylabel(LABELS["val_accuracy"])
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, out / "wall_clock.png")


def comparison_figure(scores: dict[str, float], stderrs: dict[str, float | None], names: dict[str, str]):
    """The models' test pass@1 as one bar chart: each model by its name (``names``) on the axis, the
    bars from 0, each with its standard error and its gain over the first (the starting model)."""
    models = list(scores)
    values = [100 * scores[m] for m in models]
    errors = [100 * (stderrs.get(m) or 0.0) for m in models]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(models), 3.6))
    bars = ax.bar([names[m] for m in models], values, yerr=errors, capsize=4, color="#4c72b0")
    for i, (bar, value) in enumerate(zip(bars, values)):
        gain = f" ({value - values[0]:+.1f})" if i else ""
        ax.annotate(
            f"{value:.1f}%{gain}", (bar.get_x() + bar.get_width() / 2, value + errors[i]), ha="center", va="bottom"
        )
    ax.set_ylim(0, max(max(v + e for v, e in zip(values, errors)) * 1.2, 1.0))
    ax.set_ylabel("test pass@1 (%)")
    ax.set_title("test pass@1 by model (± standard error)")
    fig.tight_layout()
    return fig


def figure_pixels(fig):
    """``fig`` as an RGB array (what MLflow's image charts take), the figure freed."""
    import numpy as np

    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return pixels
