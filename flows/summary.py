"""What a run says when it ends: its result and where to look next, on the console.

The headline (each model's test pass@1 with its standard error, and the gain over the model training started
from, named by what it is), each stage's wall time in minutes and seconds, the health verdict, then the
absolute path of the run page, the MLflow run's address as ``make ui`` serves it, and the ``make ui``
command for the set. The run is also recorded in ``.grpoflow/last_run.json``, so that ``make ui`` opens on
the experiment of the set that ran last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grpoflow import metric_names as M
from grpoflow.io import write_json
from tasks.notes import clock, model_name, starting_model

LAST_RUN = Path(".grpoflow/last_run.json")
# Set by a smoke run (flows/rehearse.py) for the flow it runs in a scratch copy: the folder of this
# workspace its page and metrics will be kept in once it ends, the copy and its MLflow store deleted.
SMOKE_KEPT_ENV = "GRPOFLOW_SMOKE_KEPT_IN"


def smoke_kept_in() -> str | None:
    """In a smoke run's scratch copy, the workspace folder its results will be kept in; else None."""
    return os.environ.get(SMOKE_KEPT_ENV) or None


def headline_rows(evaluation: dict | None, start: str) -> list[str]:
    """One line per evaluated model: its name, test pass@1 ± SE, and the gain over the starting model."""
    models = (evaluation or {}).get("models") or {}
    scores = {m: (models[m].get("test") or {}) for m in models}
    base = scores.get("sft", {}).get(M.PASS_AT_1)
    rows = []
    for name in sorted(scores, key=lambda m: (m != "sft", m)):
        value, se = scores[name].get(M.PASS_AT_1), scores[name].get(M.stderr_of(M.PASS_AT_1))
        if value is None:
            continue
        shown = f"{100 * value:.1f}%" + (f" ± {100 * se:.1f}" if se is not None else "")
        gain = "" if name == "sft" or base is None else f"{100 * (value - base):+.1f} points over {start}"
        rows.append(f"  {model_name(name, start):<24} {shown:<14} {gain}".rstrip())
    return rows


def summary(
    stages: Sequence[tuple[str, bool, float]], evaluation: dict | None, health: str, start: str, where: dict[str, str]
) -> str:
    """The end of a run: ``stages`` as (name, ran, seconds); ``where`` the page, the MLflow link and the UI command."""
    lines = [f"{name:>20}: {'ran' if ran else 'cached'} in {clock(s)}" for name, ran, s in stages]
    lines.append(f"{'in all':>20}: {clock(sum(s for _, _, s in stages))}")
    lines += ["", "Result (test pass@1 ± standard error):", *(headline_rows(evaluation, start) or ["  not evaluated"])]
    if health:
        lines.append(f"Health: {health}")
    lines += [f"{label}: {value}" for label, value in where.items() if value]
    return "\n".join(lines) + "\n"


def record_last_run(params_file: str, experiment_id: str, run_id: str, link: str) -> None:
    """The run ``make ui`` opens on next (its set's experiment), and what the summary links to."""
    record = {"params_file": params_file, "experiment_id": experiment_id, "run_id": run_id, "mlflow_link": link}
    write_json(LAST_RUN, record)


def last_run() -> dict | None:
    """The record of the last run in this workspace, if any."""
    try:
        return json.loads(LAST_RUN.read_text())
    except (OSError, ValueError):
        return None


def ui_command(params_file: str) -> str:
    """The command that serves this project's MLflow store on the port the links use."""
    port = os.environ.get("UI_PORT", "5000")
    return f"make ui PARAMS={params_file}" + (f" UI_PORT={port}" if port != "5000" else "")


def where_next(params_file: str, page: Path | None = None) -> dict[str, str]:
    """Where the run that just ended is: its page (default reports/run.html), its MLflow run, the UI command."""
    from flows.run_report import REPORT

    page = page or REPORT
    kept = smoke_kept_in()
    if kept:  # a smoke run, in a scratch copy deleted once it ends: its page is kept, its MLflow store is not
        return {"Run page": str(Path(kept) / page) if page.is_file() else ""}
    last = last_run() or {}
    return {
        "Run page": str(page.resolve()) if page.is_file() else "",
        "MLflow run": last.get("mlflow_link", "") if last.get("params_file") == params_file else "",
        "Open it with": ui_command(params_file),
    }


def where_text(params_file: str, page: Path | None = None) -> str:
    """:func:`where_next` as lines, for the flows that print their own result (ablation, tune)."""
    return "".join(f"{label}: {value}\n" for label, value in where_next(params_file, page).items() if value)


def run_summary(results: Sequence[Any], params: Any, params_file: str) -> str:
    """:func:`summary` of the run that just ended in this workspace (``results``: its StageResults)."""
    from flows.run_report import _json, health_verdict, trainings
    from tasks.stages import stage

    evaluation = _json(stage("evaluate").file("metrics")) if any(r.stage == "evaluate" for r in results) else None
    trains = trainings(_json, {r.stage for r in results})
    stages = [(r.stage, r.ran, r.seconds) for r in results]
    return summary(stages, evaluation, health_verdict(trains), starting_model(params), where_next(params_file))
