"""Stage ``compare``: the GRPO-vs-PPO ablation report, plots for DVC and MLflow.

    python -m tasks.compare --params params/default.yaml --out reports/compare --metrics metrics/compare.json
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import mlflow  # noqa: E402

from grpoflow.compare import memory_breakdown, summarize, winner  # noqa: E402
from grpoflow.config import Params  # noqa: E402
from grpoflow.io import atomic_write, write_json  # noqa: E402
from tasks import tracking  # noqa: E402
from tasks.cli import run_stage_cli, stage_parser  # noqa: E402
from tasks.stages import stage  # noqa: E402

ALGORITHMS = ("grpo", "ppo")


def read_history(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def plot_curves(histories: dict[str, list[dict]], out: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, key in zip(axes, ("reward_mean", "kl", "val_accuracy")):
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
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, label in zip(axes, ("peak_memory_mb", "seconds_per_step"), ("peak memory (MiB)", "seconds per step")):
        ax.bar(list(summaries), [summaries[a][key] or 0 for a in summaries], color=["tab:blue", "tab:orange"])
        ax.set_title(label)
    fig.tight_layout()
    path = out / "cost.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(summaries: dict, memory: dict, verdict: str) -> str:
    keys = [k for k in summaries["grpo"] if k != "algorithm"]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["# GRPO vs PPO", "", f"Winner on test pass@1: **{verdict}** (one seed; see the ablation flow for several).", "",
             "| metric | GRPO | PPO |", "|---|---|---|"]
    lines += [f"| {k} | {fmt(summaries['grpo'][k])} | {fmt(summaries['ppo'][k])} |" for k in keys]
    lines += ["", "## Peak memory", "", f"GRPO / PPO = {memory['grpo_over_ppo']:.3f}; PPO needs {memory['difference_mb']:.1f} MiB more, of "
              f"which the critic's model state (weights {memory['critic_weights_mb']:.1f} + gradients {memory['critic_gradients_mb']:.1f} "
              f"+ AdamW moments {memory['critic_optimizer_mb']:.1f} MiB) explains {memory['critic_model_state_mb']:.1f}; the rest "
              f"({memory['other_mb']:.1f} MiB) is what the critic costs beyond its state: its activations in forward and "
              f"backward, its second DeepSpeed engine's buffers, and allocator slack (peak RSS on CPU).", "",
              "![curves](curves.png)", "", "![cost](cost.png)"]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace, params: Params) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evaluation = json.loads(Path(args.evaluation).read_text())
    k = evaluation["k"]
    # Where each algorithm's stage writes (tasks/stages.py), read, like dvc.yaml, from the declaration.
    histories = {a: read_history(Path(stage(a).option("history").path)) for a in ALGORITHMS}
    trains = {a: json.loads(Path(stage(a).option("metrics").path).read_text()) for a in ALGORITHMS}
    summaries = {a: summarize(a, trains[a], histories[a], evaluation["models"].get(a, {}), k) for a in ALGORITHMS}
    critic_params = json.loads(Path(args.sft_metrics).read_text())["parameters"]
    memory = memory_breakdown(summaries["grpo"], summaries["ppo"], critic_params)
    verdict = winner(summaries["grpo"], summaries["ppo"])
    with tracking.stage_run("compare", params, args.params):
        curves, cost = plot_curves(histories, out), plot_bars(summaries, out)
        text = report(summaries, memory, verdict)
        with atomic_write(out / "report.md") as fh:
            fh.write(text)
        table = [{"metric": key, "grpo": summaries["grpo"][key], "ppo": summaries["ppo"][key]} for key in summaries["grpo"]]
        write_json(out / "table.json", table)
        metrics = {"summaries": summaries, "memory": memory, "winner_on_test_pass@1": verdict}
        write_json(args.metrics, metrics)
        mlflow.log_metrics(tracking.numeric_metrics({"memory": memory, **{a: s for a, s in summaries.items()}}))
        mlflow.set_tag("winner_on_test_pass_at_1", verdict)
        for path in (curves, cost, out / "report.md"):
            mlflow.log_artifact(str(path))
    print(text)


if __name__ == "__main__":
    parser = stage_parser("compare", __doc__)
    run_stage_cli(parser, main)
