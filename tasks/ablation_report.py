"""Stage ``ablation_report``: the arms over their seeds. Per arm, the mean, std and 95% interval of
test pass@1, seconds per step, peak memory, final KL and the forgetting check's held-out loss
increase over the reference; each arm against the first (the baseline) by Welch's t-test on test
pass@1, and on the held-out loss increase (less is better: the arm forgets less); one plot of every
arm's reward, KL and validation accuracy (means over its seeds), and one of validation accuracy
against wall-clock time (mean and band over the seeds: the cost of the gain).

    python -m tasks.ablation_report --params params/default.yaml --results grpo-s0=metrics/arms/grpo-s0.json ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grpoflow import metric_names as M
from grpoflow.config import Params
from tasks import html_report
from tasks.cli import run_stage_cli, stage_parser
from tasks.stages import ablation_report_stage, arm_stage

FORGETTING = "heldout_loss_increase"
METRICS = ("test_pass@1", "seconds_per_step", "peak_memory_mb", "kl_final", FORGETTING)


def _results(items: list[str]) -> dict[str, dict[int, Path]]:
    """``arm-sSEED=path`` items as {arm: {seed: path}}, the arms in the order given."""
    arms: dict[str, dict[int, Path]] = {}
    for item in items:
        key, _, path = item.partition("=")
        arm, _, seed = key.rpartition("-s")
        arms.setdefault(arm, {})[int(seed)] = Path(path)
    return arms


def summarize(runs: dict[str, dict[int, dict]]) -> dict:
    """Per arm, each metric's statistics over its seeds; each arm's verdict against the first."""
    from grpoflow.evaluation.compare import arm_stats, verdict

    table = {
        arm: {
            m: arm_stats([float(r[m]) for r in seeds.values() if r.get(m) is not None])
            for m in METRICS
            if any(r.get(m) is not None for r in seeds.values())
        }
        for arm, seeds in runs.items()
    }
    baseline, *others = list(runs)

    def against_baseline(metric: str, higher_is_better: bool) -> dict:
        """Each other arm's verdict on ``metric``, where both it and the baseline measured it."""
        if metric not in table[baseline]:
            return {}
        base = table[baseline][metric]["values"]
        return {
            arm: verdict(base, table[arm][metric]["values"], higher_is_better=higher_is_better)
            for arm in others
            if metric in table[arm]
        }

    return {
        "baseline": baseline,
        "order": list(runs),
        "seeds": {arm: sorted(seeds) for arm, seeds in runs.items()},
        "arms": table,
        "verdicts": against_baseline("test_pass@1", True),
        "forgetting_verdicts": against_baseline(FORGETTING, False),
    }


def _cell(stats: dict | None) -> str:
    if not stats:
        return "–"
    text = f"{stats['mean']:.4g}"
    if stats["std"] is not None:
        low, high = stats["ci95"]
        text += f" ± {stats['std']:.2g} [{low:.4g}, {high:.4g}]"
    return text


def _verdict_cell(v: dict | None) -> str:
    if v is None:  # an arm whose metrics predate the measure
        return "–"
    return f"{v['verdict']} ({v['difference']:+.3f}" + (f", p={v['p_value']:.3g})" if v["p_value"] is not None else ")")


def rows(result: dict) -> list[dict]:
    """The table a person reads: one row per arm, mean ± std [95% interval], then the verdicts."""
    base = result["baseline"]
    columns = {f"vs {base}": result["verdicts"]}
    if result.get("forgetting_verdicts"):
        columns[f"forgetting vs {base}"] = result["forgetting_verdicts"]
    out = []
    for arm in result["order"]:  # the arms as given, the baseline first (a JSON file's keys come back sorted)
        stats = result["arms"][arm]
        out.append(
            {
                "arm": arm,
                "seeds": len(result["seeds"][arm]),
                **{m: _cell(stats.get(m)) for m in METRICS},
                **{c: "baseline" if arm == base else _verdict_cell(v.get(arm)) for c, v in columns.items()},
            }
        )
    return out


def _mean_start(by_seed: dict) -> float | None:
    """An arm's validation accuracy before training (its reference's), mean over its seeds."""
    starts = [m[M.VAL_ACCURACY_START] for m in by_seed.values() if m.get(M.VAL_ACCURACY_START) is not None]
    return sum(starts) / len(starts) if starts else None


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow or matplotlib

    from grpoflow.evaluation.compare import VERDICT_TEST
    from grpoflow.io import atomic_write, write_json
    from tasks import tracking
    from tasks.plots import mean_over_seeds, plot_accuracy_by_wall_clock, plot_curves, read_history

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = _results(args.results)
    runs = {arm: {seed: json.loads(p.read_text()) for seed, p in seeds.items()} for arm, seeds in paths.items()}
    histories = {
        arm: [read_history(Path(arm_stage(arm, seed).file("history"))) for seed in seeds]
        for arm, seeds in paths.items()
    }
    result = summarize(runs)
    table = rows(result)
    with tracking.stage_run("ablation_report", params, args.params):
        starts = {arm: _mean_start(by_seed) for arm, by_seed in runs.items()}
        curves = plot_curves({arm: mean_over_seeds(runs_) for arm, runs_ in histories.items()}, out, starts)
        wall_clock = plot_accuracy_by_wall_clock(histories, out, starts)
        write_json(out / "table.json", table)
        head = (
            f"Each arm against {result['baseline']} on test pass@1 and on the held-out loss increase (forgetting: "
            f"less is better): {VERDICT_TEST}. Cells: mean ± std [95% interval of the mean] over the seeds."
        )
        md = ["# Ablation", "", head, "", "| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
        md += ["| " + " | ".join(str(v) for v in r.values()) + " |" for r in table]
        with atomic_write(out / "report.md") as fh:
            fh.write(
                "\n".join(md) + "\n\nPlots: `curves.png` and `wall_clock.png` beside this file; `report.html` "
                "has them inline.\n"
            )
        with atomic_write(out / "report.html") as fh:
            fh.write(
                html_report.page(
                    "Ablation",
                    [
                        f'<p class="headline">{html_report.esc(head)}</p>',
                        html_report.table(table),
                        "<h2>Curves</h2>",
                        html_report.image(curves, "reward and validation accuracy per arm"),
                        "<h2>Validation accuracy against wall-clock time</h2>",
                        html_report.image(wall_clock, "validation accuracy per arm against training minutes"),
                    ],
                )
            )
        write_json(args.metrics, result)
        tracking.log_summary({arm: {m: s["mean"] for m, s in stats.items()} for arm, stats in result["arms"].items()})
        for path in (out / "report.html", out / "report.md", curves, wall_clock):
            mlflow.log_artifact(str(path))
    print("\n".join(md))


if __name__ == "__main__":
    parser = stage_parser("ablation_report", __doc__, declared=ablation_report_stage(["ARM"], [0]))
    run_stage_cli(parser, main)
