"""Stage ``compare``: the algorithms side by side (GRPO against the PPO baseline, and any other of
grpoflow.catalog): the report, plots for DVC and MLflow.

python -m tasks.compare --params params/default.yaml --out reports/compare --metrics metrics/compare.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grpoflow import catalog
from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.evaluation.compare import memory_breakdown, summarize, winner
from grpoflow.io import atomic_write, write_json
from tasks import html_report
from tasks.cli import run_stage_cli, stage_parser
from tasks.stages import stage


def critic_pair() -> tuple[str, str] | None:
    """The pair whose peak memory the report explains: the default algorithm against the first
    one with a critic (none: no breakdown)."""
    critic = next((e.name for e in catalog.ALGORITHMS.values() if e.critic), None)
    return (catalog.default(), critic) if critic else None


def _memory_sentence(memory: dict) -> str:
    pair = critic_pair()
    if not memory or pair is None:
        return "No algorithm trains a critic: there is no memory to attribute to one."
    a, b = pair
    ta, tb = catalog.title(a), catalog.title(b)
    return (
        f"{ta} / {tb} = {memory[f'{a}_over_{b}']:.3f}; {tb} needs {memory['difference_mb']:.1f} MiB more, of "
        f"which the critic's model state (weights {memory['critic_weights_mb']:.1f} "
        f"+ gradients {memory['critic_gradients_mb']:.1f} + AdamW moments {memory['critic_optimizer_mb']:.1f} MiB) "
        f"explains {memory['critic_model_state_mb']:.1f}; the rest "
        f"({memory['other_mb']:.1f} MiB) is what the critic costs beyond its state: its activations in forward and "
        f"backward, its second DeepSpeed engine's buffers, and allocator slack (peak RSS on CPU)."
    )


def table_rows(summaries: dict) -> list[dict]:
    """The comparison as rows: metric, then each algorithm's value."""
    first = next(iter(summaries.values()))
    return [{"metric": k, **{a: s[k] for a, s in summaries.items()}} for k in first if k != "algorithm"]


def title(names: list[str]) -> str:
    """The report's title: the algorithms, ``GRPO vs PPO``."""
    return " vs ".join(catalog.title(a) for a in names)


def winner_line(verdict: str) -> str:
    return f"Winner on test pass@1: {verdict} (one seed; see the ablation flow for several)."


def report(summaries: dict, memory: dict, verdict: str) -> str:
    """The comparison in Markdown (Prefect's artifact, DVC's reports/); the plots are beside it."""
    names = list(summaries)
    lines = [
        f"# {title(names)}",
        "",
        winner_line(verdict).replace(verdict, f"**{verdict}**", 1),
        "",
        "| metric | " + " | ".join(catalog.title(a) for a in names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    lines += [
        f"| {r['metric']} | " + " | ".join(html_report.fmt(r[a]) for a in names) + " |" for r in table_rows(summaries)
    ]
    lines += [
        "",
        "## Peak memory",
        "",
        _memory_sentence(memory),
        "",
        "Plots: `curves.png` and `cost.png` beside this file; `report.html` has them inline.",
    ]
    return "\n".join(lines) + "\n"


def report_html(summaries: dict, memory: dict, verdict: str, curves: Path, cost: Path) -> str:
    """The comparison as one self-contained page, plots inline (MLflow's viewer shows it)."""
    return html_report.page(
        title(list(summaries)),
        [
            f'<p class="headline">{html_report.esc(winner_line(verdict))}</p>',
            html_report.table(table_rows(summaries), ["metric", *summaries]),
            "<h2>Training curves</h2>",
            html_report.image(curves, "reward, KL and validation accuracy per step"),
            "<h2>Cost</h2>",
            html_report.image(cost, "peak memory and seconds per step"),
            f"<h2>Peak memory</h2><p>{html_report.esc(_memory_sentence(memory))}</p>",
        ],
    )


def _memory(summaries: dict, critic_parameters: int) -> dict:
    """The memory breakdown of :func:`critic_pair` (empty without a critic)."""
    pair = critic_pair()
    return memory_breakdown(summaries[pair[0]], summaries[pair[1]], critic_parameters, pair) if pair else {}


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow or matplotlib

    from tasks import notes, tracking
    from tasks.plots import plot_bars, plot_curves, read_history

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evaluation = json.loads(Path(args.evaluation).read_text())
    k = evaluation["k"]
    # Where each algorithm's stage writes (tasks/stages.py), read, like dvc.yaml, from the declaration.
    names = catalog.names()
    histories = {a: read_history(Path(stage(a).file("history"))) for a in names}
    trains = {a: json.loads(Path(stage(a).file("metrics")).read_text()) for a in names}
    summaries = {a: summarize(a, trains[a], histories[a], evaluation["models"].get(a, {}), k) for a in names}
    memory = _memory(summaries, json.loads(Path(args.sft_metrics).read_text())["parameters"])
    verdict = winner(summaries)
    with tracking.stage_run("compare", params, args.params):
        starts = {a: trains[a].get(M.VAL_ACCURACY_START) for a in names}  # the one reference's score
        curves, cost = plot_curves(histories, out, starts), plot_bars(summaries, out)
        text = report(summaries, memory, verdict)
        with atomic_write(out / "report.md") as fh:
            fh.write(text)
        with atomic_write(out / "report.html") as fh:
            fh.write(report_html(summaries, memory, verdict, curves, cost))
        write_json(out / "table.json", table_rows(summaries))
        metrics = {"summaries": summaries, "memory": memory, "winner_on_test_pass@1": verdict}
        write_json(args.metrics, metrics)
        tracking.log_summary({"memory": memory, **{a: s for a, s in summaries.items()}})
        mlflow.set_tag("winner_on_test_pass_at_1", verdict)
        mlflow.set_tag(tracking.NOTE, notes.compare_note(metrics))
        for path in (curves, cost, out / "report.md", out / "report.html"):
            mlflow.log_artifact(str(path))
    print(text)


if __name__ == "__main__":
    parser = stage_parser("compare", __doc__)
    run_stage_cli(parser, main)
