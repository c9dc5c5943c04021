"""Stage ``compare``: the algorithms side by side (GRPO against the PPO baseline, and any other of
grpoflow.catalog): the report, plots for DVC and MLflow.

python -m tasks.compare --params params/default.yaml --out reports/compare --metrics metrics/compare.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from grpoflow import catalog
from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.evaluation.compare import memory_breakdown, ratio_key, summarize, winner
from grpoflow.io import atomic_write, write_json
from tasks import html_report
from tasks.cli import run_stage_cli, stage_parser
from tasks.stages import stage


def critic_pair() -> tuple[str, str] | None:
    """The pair whose peak memory the report explains: the default algorithm against the first
    one with a critic (none: no breakdown)."""
    critic = next((e.name for e in catalog.ALGORITHMS.values() if e.critic), None)
    return (catalog.default(), critic) if critic else None


MEMORY_PARTS = ("runtime_mb", "weights_mb", "gradients_mb", "optimizer_mb", "activations_mb")


def _memory_sentence(memory: dict) -> str:
    pair = critic_pair()
    if not memory or pair is None:
        return "No algorithm trains a critic (or a run kept no memory record): there is no memory to attribute to one."
    a, b = pair
    ta, tb, ratio = catalog.title(a), catalog.title(b), ratio_key(a, b)
    return (
        f"{ta} / {tb} peak = {memory[ratio]:.3f} as measured; {memory[f'{ratio}_theory_peak']:.3f} "
        f"predicted by adding only the critic's model state to {ta}'s peak, and "
        f"{memory[f'{ratio}_theory_model_state']:.3f} for the two runs' model states alone (the limit where "
        f"the models are all the memory). {tb} needs {memory['difference_mb']:.1f} MiB more: the critic's model state "
        f"({memory['critic_parameters']:,} parameters, {memory['critic_trainable_parameters']:,} trained: weights "
        f"{memory['critic_weights_mb']:.1f} + gradients {memory['critic_gradients_mb']:.1f} + optimizer states "
        f"{memory['critic_optimizer_mb']:.1f} MiB = {memory['critic_model_state_mb']:.1f}) and "
        f"{memory['critic_activations_mb']:.1f} MiB more activations and buffers at the peak than {ta}'s (its "
        f"passes, its second DeepSpeed engine, allocator slack). Peak RSS on CPU, "
        f"torch.cuda.max_memory_allocated on a GPU."
    )


def memory_rows(memory: dict) -> list[dict]:
    """Each arm's peak split (MiB) as rows: part, then each arm's value."""
    arms = memory.get("arms", {})
    if not arms:
        return []
    parts = (*MEMORY_PARTS, "peak_mb")
    return [{"part": p.removesuffix("_mb"), **{a: round(arms[a][p], 1) for a in arms}} for p in parts]


def table_rows(summaries: dict) -> list[dict]:
    """The comparison as rows: metric, then each algorithm's value."""
    first = next(iter(summaries.values()))
    return [{"metric": k, **{a: s.get(k) for a, s in summaries.items()}} for k in first if k != "algorithm"]


def title(names: list[str]) -> str:
    """The report's title: the algorithms, ``GRPO vs PPO``."""
    return " vs ".join(catalog.title(a) for a in names)


def winner_line(verdict: str) -> str:
    return f"Winner on test pass@1: {verdict} (one seed; see the ablation flow for several)."


def scores_line(models: dict) -> str:
    """Every evaluated model's test pass@1 with its standard error over prompts, the start first."""
    from tasks.html_report import percent

    return "; ".join(f"{name} {percent(m['pass@1'], m.get('pass@1_se'))}" for name, m in models.items())


def paired_lines(paired: dict) -> list[str]:
    """One line a paired test: ``grpo - ppo: +1.2 points ± 1.0 (95% [-0.8, 3.2]), p 0.24 (McNemar's ...)``."""
    lines = []
    for key, t in paired.items():
        low, high = (100 * v for v in t["ci95"])
        split = f"; right only on {t['a_only']} vs {t['b_only']} prompts" if "a_only" in t else ""
        lines.append(
            f"{key.replace('_minus_', ' - ')}: {100 * t['difference']:+.1f} points ± {100 * t['se']:.1f} "
            f"(95% [{low:+.1f}, {high:+.1f}]) over {t['prompts']} prompts, p {t['p_value']:.3g} ({t['test']}{split})"
        )
    return lines


def report(summaries: dict, memory: dict, verdict: str, extra: dict | None = None) -> str:
    """The comparison in Markdown (Prefect's artifact, DVC's reports/); the plots are beside it.
    ``extra``: every evaluated model's test scores and the paired tests (:func:`paired_tests`)."""
    names, extra = list(summaries), extra or {}
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
    if extra.get("models"):
        lines += ["", "## Test pass@1 on the same prompts", "", scores_line(extra["models"]), ""]
        lines += [f"- {line}" for line in paired_lines(extra.get("paired", {}))]
    lines += ["", "## Peak memory", "", _memory_sentence(memory), ""]
    rows = memory_rows(memory)
    if rows:
        lines += ["| part (MiB) | " + " | ".join(r for r in rows[0] if r != "part") + " |", "|---" * len(rows[0]) + "|"]
        lines += [
            f"| {r['part']} | " + " | ".join(html_report.fmt(v) for k, v in r.items() if k != "part") + " |"
            for r in rows
        ]
    lines += ["", f"Plots: {', '.join(f'`{p}`' for p in PLOTS)} beside this file; `report.html` has them inline."]
    return "\n".join(lines) + "\n"


PLOTS = ("curves.png", "cost.png", "wall_clock.png", "memory.png")


def report_html(summaries: dict, memory: dict, verdict: str, plots: dict[str, Path], extra: dict | None = None) -> str:
    """The comparison as one self-contained page, plots inline (MLflow's viewer shows it)."""
    extra = extra or {}
    tests = "".join(f"<li>{html_report.esc(line)}</li>" for line in paired_lines(extra.get("paired", {})))
    heading = "<h2>Test pass@1 on the same prompts</h2>"
    scores = (
        f"{heading}<p>{html_report.esc(scores_line(extra['models']))}</p><ul>{tests}</ul>"
        if extra.get("models")
        else ""
    )
    rows = memory_rows(memory)
    return html_report.page(
        title(list(summaries)),
        [
            f'<p class="headline">{html_report.esc(winner_line(verdict))}</p>',
            html_report.table(table_rows(summaries), ["metric", *summaries]),
            scores,
            "<h2>Training curves</h2>",
            html_report.image(plots["curves.png"], "reward, KL, within-group reward std and validation accuracy"),
            html_report.image(plots["wall_clock.png"], "validation accuracy against wall-clock time"),
            "<h2>Cost</h2>",
            html_report.image(plots["cost.png"], "peak memory and seconds per step"),
            f"<h2>Peak memory</h2><p>{html_report.esc(_memory_sentence(memory))}</p>",
            html_report.table(rows) if rows else "",
            html_report.image(plots["memory.png"], "where each arm's peak memory goes") if rows else "",
        ],
    )


def _memory(trains: dict) -> dict:
    """The memory breakdown of :func:`critic_pair` (empty without a critic, or where a run kept no record)."""
    pair = critic_pair()
    if pair is None or any(M.MEMORY not in trains[a] for a in pair):
        return {}
    return memory_breakdown(trains[pair[0]][M.MEMORY], trains[pair[1]][M.MEMORY], pair)


def per_prompt_pass(path: Path) -> dict[str, float]:
    """A model's pass@1 on each prompt of its evaluation outputs (the share of its samples that were right)."""
    from grpoflow.io import read_jsonl

    return {str(r["id"]): r["samples_correct"] / len(r["samples"]) for r in read_jsonl(path)}


def paired_tests(outputs: Path, models: list[str], start: str = "sft") -> dict:
    """Every evaluated model's test pass@1 (± its standard error), and paired tests on the prompts
    they share: each algorithm against the starting model, and each pair of algorithms."""
    from grpoflow.evaluation.compare import paired_test

    found = {m: per_prompt_pass(outputs / f"{m}_test.jsonl") for m in [start, *models]}
    found = {m: v for m, v in found.items() if v}
    pairs = [(a, start) for a in models if a in found and start in found]
    pairs += [(a, b) for i, a in enumerate(models) for b in models[i + 1 :] if a in found and b in found]
    paired = {}
    for a, b in pairs:
        ids = sorted(found[a].keys() & found[b].keys())
        if len(ids) > 1:
            paired[f"{a}_minus_{b}"] = paired_test([found[a][i] for i in ids], [found[b][i] for i in ids])
    return {"paired": paired}


def _models(evaluation: dict, names: list[str]) -> dict:
    """Test pass@1 and its standard error of the starting model and each algorithm, as evaluate scored them."""
    models = evaluation["models"]
    return {
        n: {"pass@1": models[n]["test"]["pass@1"], "pass@1_se": models[n]["test"].get("pass@1_se")}
        for n in ("sft", *names)
        if n in models and "pass@1" in models[n].get("test", {})
    }


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow or matplotlib

    from tasks import notes, tracking
    from tasks.plots import plot_accuracy_by_wall_clock, plot_bars, plot_curves, plot_memory, read_history

    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    evaluation = json.loads(Path(args.evaluation).read_text())
    k = evaluation["k"]
    # Where each algorithm's stage writes (tasks/stages.py), read, like dvc.yaml, from the declaration.
    names = catalog.default_run()  # an opt-in algorithm has no stage: it trains as an ablation arm
    histories = {a: read_history(Path(stage(a).file("history"))) for a in names}
    trains = {a: json.loads(Path(stage(a).file("metrics")).read_text()) for a in names}
    summaries = {a: summarize(a, trains[a], histories[a], evaluation["models"].get(a, {}), k) for a in names}
    memory = _memory(trains)
    extra = {"models": _models(evaluation, names), **paired_tests(Path(args.outputs), names)}
    verdict = winner(summaries)
    with tracking.stage_run("compare", params, args.params):
        starts = {a: trains[a].get(M.VAL_ACCURACY_START) for a in names}  # the one reference's score
        plots = {
            "curves.png": plot_curves(histories, out, starts),
            "cost.png": plot_bars(summaries, out),
            "wall_clock.png": plot_accuracy_by_wall_clock({a: [h] for a, h in histories.items()}, out, starts),
            "memory.png": plot_memory(memory.get("arms", {}), MEMORY_PARTS, out),
        }
        text = report(summaries, memory, verdict, extra)
        with atomic_write(out / "report.md") as fh:
            fh.write(text)
        with atomic_write(out / "report.html") as fh:
            fh.write(report_html(summaries, memory, verdict, plots, extra))
        write_json(out / "table.json", table_rows(summaries))
        metrics = {"summaries": summaries, "memory": memory, "winner_on_test_pass@1": verdict, **extra}
        metrics["seconds"] = round(time.perf_counter() - start, 1)
        write_json(args.metrics, metrics)
        tracking.log_summary({"memory": memory, **extra, **{a: s for a, s in summaries.items()}})
        mlflow.set_tag("winner_on_test_pass_at_1", verdict)
        mlflow.set_tag(tracking.NOTE, notes.compare_note(metrics))
        for path in (*plots.values(), out / "report.md", out / "report.html"):
            mlflow.log_artifact(str(path))
    print(text)


if __name__ == "__main__":
    parser = stage_parser("compare", __doc__)
    run_stage_cli(parser, main)
