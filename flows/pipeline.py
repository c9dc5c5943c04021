"""The grpoflow pipeline as a Prefect flow: every dvc.yaml stage, in order, as a Prefect task.

Each task runs ``dvc repro --single-item <stage>``: DVC decides whether the stage is stale and
caches its outputs, Prefect adds observability (logs, artifacts, retries, schedules), MLflow
gets one parent run per flow run with a child per stage.

    python -m flows.pipeline --params params/default.yaml [--stages prepare ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

from flows.dag import Stage, pipeline_params_file, stage_order
from grpoflow.config import ConfigError, load_params
from tasks import tracking

DVC_YAML = "dvc.yaml"


@dataclass
class StageResult:
    stage: str
    ran: bool
    seconds: float
    metrics: dict


class StageFailed(RuntimeError):
    pass


def _path_with_this_python() -> str:
    """PATH with this interpreter's bin dir first: stage commands say ``python``, and must get
    the environment the flow runs in, activated or not."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def _stage_reports(stage: Stage) -> list[Path]:
    """The ``report.md`` files a stage writes into its output directories."""
    return [Path(out) / "report.md" for out in stage.outs if (Path(out) / "report.md").is_file()]


def _publish_reports(stage: Stage) -> str:
    text = "\n\n".join(p.read_text() for p in _stage_reports(stage))
    if text:
        create_markdown_artifact(text, key=f"{stage.name.replace('_', '-')}-report", description=f"{stage.name} report")
    return text


def _read_metrics(stage: Stage) -> dict:
    merged: dict = {}
    for path in stage.metrics:
        if Path(path).is_file():
            merged.update(json.loads(Path(path).read_text()))
    return merged


def _stream(cmd: list[str], env: dict[str, str], marker: str = "") -> tuple[int, list[str], bool]:
    """Run ``cmd``, streaming its output into the Prefect log:
    ``(exit code, last 40 lines, whether a line started with marker)``."""
    logger = get_run_logger()
    proc = subprocess.Popen(cmd, env={**os.environ, **env, "PATH": _path_with_this_python()},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    seen = False
    for line in proc.stdout:  # type: ignore[union-attr]
        line = line.rstrip()
        if line:
            logger.info(line)
            tail = (tail + [line])[-40:]
            seen = seen or bool(marker and line.startswith(marker))
    return proc.wait(), tail, seen


def _fail(name: str, code: int, tail: list[str], reports: str = "") -> None:
    log_tail = "\n".join(tail)
    create_markdown_artifact(
        f"## Stage `{name}` failed (exit {code})\n\n{reports}\n\n### Log tail\n\n```\n{log_tail}\n```",
        key=f"failed-{name.replace('_', '-')}",
        description=f"grpoflow stage {name} failed",
    )
    raise StageFailed(f"stage {name!r} failed with exit code {code}:\n{log_tail}")


@task(name="dvc-stage", task_run_name="{stage.name}")
def run_dvc_stage(stage: Stage, env: dict[str, str]) -> StageResult:
    """``dvc repro --single-item`` one stage, streaming its output into the Prefect log."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", stage.name]
    code, tail, ran = _stream(cmd, env, marker=f"Running stage '{stage.name}'")
    if code != 0:
        _fail(stage.name, code, tail, "\n\n".join(p.read_text() for p in _stage_reports(stage)))
    _publish_reports(stage)
    return StageResult(stage.name, ran, round(time.perf_counter() - start, 2), _read_metrics(stage))


@task(name="stage-cli", task_run_name="{name}")
def run_stage_cli(name: str, args: list[str], env: dict[str, str]) -> None:
    """A stage CLI run outside DVC's cache (e.g. extra training seeds of the ablation)."""
    code, tail, _ = _stream([sys.executable, "-m", *args], env)
    if code != 0:
        _fail(name, code, tail)


def _check_params_file(params_file: str) -> None:
    load_params(params_file)  # fail before any work, naming the bad key
    wired = pipeline_params_file(DVC_YAML)
    if wired and Path(wired).resolve() != Path(params_file).resolve():
        raise ConfigError(
            f"dvc.yaml's stages read {wired}, not {params_file}: set vars.params_file in dvc.yaml "
            "to the parameter set you want, so that `dvc repro` and this flow run the same thing"
        )


def _metrics_markdown(results: list[StageResult]) -> str:
    parts = ["# grpoflow pipeline\n"]
    for r in results:
        flat = tracking.numeric_metrics(r.metrics)
        rows = "\n".join(f"| {k} | {v:g} |" for k, v in sorted(flat.items()))
        state = "ran" if r.ran else "cached by DVC"
        parts.append(f"## {r.stage} ({state}, {r.seconds:.1f} s)\n\n| metric | value |\n|---|---|\n{rows}\n")
    return "\n".join(parts)


def run_stages(params, params_file: str, stages: list[str] | None, extra: Callable[[dict[str, str]], None] | None = None):
    """Run dvc.yaml stages under one MLflow parent run (then ``extra(env)``, still under it) and
    publish the stage table, metrics and MLflow link. Shared by the pipeline and ablation flows."""
    order = stage_order(DVC_YAML, only=stages)
    flow_run_id = str(flow_run.id or "none")
    results: list[StageResult] = []
    with tracking.pipeline_run(params, params_file, f"{flow_run.flow_name or 'pipeline'}-{flow_run.name or 'local'}", flow_run_id) as parent:
        parent_id = parent.info.run_id
        env = {tracking.PARENT_ENV: parent_id, tracking.FLOW_RUN_ENV: flow_run_id}
        for stage in order:
            result = run_dvc_stage(stage, env)
            if not result.ran:
                tracking.log_cached_stage(stage.name, params, params_file, parent_id, flow_run_id, list(stage.metrics))
            results.append(result)
        if extra:
            extra(env)
        experiment_id = parent.info.experiment_id
    create_table_artifact(
        [{"stage": r.stage, "status": "ran" if r.ran else "cached", "seconds": r.seconds} for r in results],
        key="pipeline-stages",
        description="Stages of this pipeline run",
    )
    create_markdown_artifact(_metrics_markdown(results), key="pipeline-metrics", description="Stage metrics")
    create_link_artifact(
        f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/{parent_id}",
        link_text="MLflow parent run (make ui)",
        key="mlflow-run",
    )
    return results


@flow(name="grpoflow-pipeline", log_prints=True)
def pipeline(params_file: str = "params/default.yaml", stages: list[str] | None = None) -> list[StageResult]:
    """Run the dvc.yaml stages (all, or ``stages`` in DAG order) for one parameter set."""
    _check_params_file(params_file)
    return run_stages(load_params(params_file), params_file, stages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument("--stages", nargs="*", default=None, help="only these dvc.yaml stages (DAG order)")
    args = parser.parse_args(argv)
    try:
        _check_params_file(args.params)  # before the Prefect server starts: bad input fails in a second
        results = pipeline(params_file=args.params, stages=args.stages)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in results:
        print(f"{r.stage:>20}: {'ran' if r.ran else 'cached'} in {r.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
