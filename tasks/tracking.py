"""MLflow tracking shared by every stage: one experiment per parameter set, one parent run per
pipeline run, one child run per stage, each tagged with what reproduces it.

The pipeline flow opens the parent run and hands its id to the stages through
``GRPOFLOW_PARENT_RUN_ID``; a stage run by hand or by ``dvc repro`` alone is a top-level run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
import yaml

from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.guard import redact_uri
from grpoflow.io import sha256_paths
from grpoflow.numerics import fingerprint
from grpoflow.provenance import code_hash, git_commit

PARENT_ENV = "GRPOFLOW_PARENT_RUN_ID"
FLOW_RUN_ENV = "GRPOFLOW_FLOW_RUN_ID"
VERIFIER_CODE = ("verifiers",)


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI`` when set, else the project's SQLite store at the working dir."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def shown_tracking_uri() -> str:
    """:func:`tracking_uri` as it may be printed, linked or logged: without user name, password or
    token (:func:`grpoflow.guard.redact_uri`). MLflow itself is given the full one."""
    return redact_uri(tracking_uri())


NOTE = "mlflow.note.content"  # the description MLflow's UI shows for an experiment or a run

# MLflow 3's UI opens an experiment on its GenAI (traces) view unless told it holds model training.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def use_experiment(params: Params) -> str:
    """The set's MLflow experiment (created on first use, marked as model training); its id."""
    mlflow.set_tracking_uri(tracking_uri())
    experiment = mlflow.set_experiment(params.mlflow_experiment)
    note = (
        f"GRPO fine-tuning runs of the parameter set '{params.experiment.name}': one parent run per pipeline run "
        "(its headline in the description, the whole run in run.html under Artifacts) and a child run per stage."
    )
    for key, value in {**EXPERIMENT_KIND, NOTE: note}.items():
        if key not in experiment.tags:
            mlflow.set_experiment_tag(key, value)
    return experiment.experiment_id


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


def mlflow_name(key: str) -> str:
    """``key`` as MLflow takes a metric name (letters, digits and ``_-. :/`` only): ``@`` becomes
    ``_at_`` (``pass@1`` -> ``pass_at_1``), anything else ``_``."""
    return re.sub(r"[^\w\-. :/]", "_", key.replace("@", "_at_"))


def numeric_metrics(d: dict[str, Any]) -> dict[str, float]:
    """The numbers of a (nested) metrics dict, with dotted keys (:func:`mlflow_name`); MLflow takes
    nothing else."""
    return {
        mlflow_name(k): float(v)
        for k, v in flatten(d).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def log_summary(metrics: dict[str, Any], prefix: str = M.SUMMARY) -> None:
    """A stage's end-of-run numbers, under ``summary/`` names (never at a curve's step 0). The
    run's constants (:data:`grpoflow.metric_names.RUN_CONSTANTS`: seeds, sizes, counts) are params:
    a metric would draw an empty one-point chart for each."""
    numbers = numeric_metrics(metrics)
    constant = {k: v for k, v in numbers.items() if k.rsplit(".", 1)[-1] in M.RUN_CONSTANTS}
    mlflow.log_metrics({f"{prefix}{k}": v for k, v in numbers.items() if k not in constant})
    if constant:
        mlflow.log_params({f"{prefix}{k}": int(v) if float(v).is_integer() else v for k, v in constant.items()})


class StepLogger:
    """Per-step metrics into the active run, at their step, under their section's name
    (:func:`grpoflow.metric_names.tracked`).

    Schedule values (KL coefficient, G, lengths, micro-batch, learning rate) are params; they are
    charted only where a schedule or an OOM back-off moves them: each move with the value it held
    until the step before (so the chart steps rather than slopes), and the last value at the end
    so the line reaches it.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}
        self._drawn: dict[str, int] = {}  # moved schedule values: the last step charted

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Log ``metrics`` of step ``step``: a phase only where it took time, and the step's wall (its phases'
        sum, evaluation and checkpoint included) as its one ``step_seconds``."""
        batch = {}
        numbers = numeric_metrics(metrics)
        if M.PHASE_WALL in numbers:
            numbers[M.STEP_SECONDS] = numbers.pop(M.PHASE_WALL)
        for key, value in numbers.items():
            name = M.tracked(key)
            if name is None or (key.startswith(M.PHASE_PREFIX) and value == 0):
                continue
            if M.is_schedule(name):
                previous = self._last.get(name)
                self._last[name] = (step, value)
                if previous is None or previous[1] == value:
                    continue
                if previous[0] > self._drawn.get(name, -1):  # the value held until the step before: a step, not a slope
                    mlflow.log_metric(name, previous[1], step=previous[0])
                self._drawn[name] = step
            batch[name] = value
        mlflow.log_metrics(batch, step=step)

    def finish(self) -> None:
        """Chart each moved schedule value's last value, where its line stopped short of it."""
        for name, drawn in self._drawn.items():
            step, value = self._last[name]
            if step > drawn:
                mlflow.log_metric(name, value, step=step)


def data_hash(prepare_metrics: str | Path = "metrics/prepare.json") -> str:
    """The digest the prepare stage computed of the splits in the workspace ("none" before it ran)."""
    path = Path(prepare_metrics)
    return str(json.loads(path.read_text()).get("data_hash", "none")) if path.is_file() else "none"


def provenance_tags(params: Params, params_file: str) -> dict[str, str]:
    commit, dirty = git_commit()
    return {
        "git_commit": commit,
        "git_dirty": str(dirty).lower(),
        "params_file": params_file,
        "params_hash": sha256_paths([params_file]) if Path(params_file).is_file() else "none",
        "seed": str(params.experiment.seed),
        "verifier_hash": code_hash(*VERIFIER_CODE),
        "data_hash": data_hash(),
        "prefect_flow_run_id": os.environ.get(FLOW_RUN_ENV, "none"),
        **({f"numerics.{k}": v for k, v in fingerprint().items()} if "torch" in sys.modules else {}),
    }


# The tiny model's own fields: nothing of a set that starts from a pretrained model (model.name_or_path).
TINY_MODEL_FIELDS = ("arch", "vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size")
RESOLVED_PARAMS = "params.resolved.yaml"  # every key of the set as it ran, an artifact of each run


def run_params(params: Params, keys: Iterable[str] | None, dumped: dict[str, Any] | None = None) -> dict[str, Any]:
    """The params a run logs: the sections and keys in ``keys`` (what its stages read; None: all), without
    the tiny model's fields where the set starts from a pretrained model (``dumped``: the set, dumped already)."""
    dumped = dict(dumped or params.model_dump(mode="json"))
    if params.model.name_or_path:
        dumped["model"] = {k: v for k, v in dumped["model"].items() if k not in TINY_MODEL_FIELDS}
    if keys is None:
        return flatten(dumped)
    chosen: dict[str, Any] = {}
    for key in keys:
        node: Any = dumped
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        chosen.update(flatten(node, f"{key}.") if isinstance(node, dict) else {key: node})
    return chosen


def stage_keys(stage: str) -> tuple[str, ...] | None:
    """The params keys stage ``stage`` reads (tasks/stages.py), or None for a run that is no declared stage."""
    from tasks.stages import BY_NAME

    return BY_NAME[stage].params if stage in BY_NAME else None


@contextmanager
def _run(
    stage: str,
    params: Params,
    params_file: str,
    parent: str | None,
    run_name: str | None = None,
    keys: Iterable[str] | None = None,
    system_metrics: bool = False,
    tags: dict[str, str] | None = None,
) -> Iterator[mlflow.ActiveRun]:
    use_experiment(params)
    all_tags = {**provenance_tags(params, params_file), "grpoflow.stage": stage, **(tags or {})}
    with mlflow.start_run(
        run_name=run_name or stage,
        parent_run_id=parent,
        nested=parent is not None,
        tags=all_tags,
        log_system_metrics=system_metrics,  # CPU, memory, and GPU where pynvml is there: MLflow's own sampler
    ) as run:
        dumped = params.model_dump(mode="json")
        mlflow.log_params(run_params(params, keys, dumped))
        mlflow.log_text(yaml.safe_dump(dumped, sort_keys=False), RESOLVED_PARAMS)
        yield run


@contextmanager
def stage_run(stage: str, params: Params, params_file: str, run_name: str | None = None) -> Iterator[mlflow.ActiveRun]:
    """An MLflow run for one stage (named ``run_name``, default the stage), nested under the
    pipeline's parent run when there is one. Run alone, it logs how long it took; under the flow, the
    flow logs the one duration it shows everywhere (:func:`finish_stage_runs`)."""
    start = time.perf_counter()
    parent = os.environ.get(PARENT_ENV) or None
    keys = stage_keys(stage)
    with _run(stage, params, params_file, parent, run_name=run_name, keys=keys, system_metrics=True) as run:
        yield run
        if parent is None:
            mlflow.log_metric(STAGE_SECONDS, time.perf_counter() - start)


STAGE_SECONDS = f"{M.SUMMARY}stage_seconds"


def finish_stage_runs(parent_run_id: str, since_ms: int, seconds: float, log_file: Path) -> list[str]:
    """The flow's word on the child runs a stage opened (those of ``parent_run_id`` started at or after
    ``since_ms``): the stage's duration as the flow measured it, DVC's checks included (the one the run
    page and the console show), and its whole log as an artifact. Their ids."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    parent = client.get_run(parent_run_id)
    found = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}' and attributes.start_time >= {since_ms}",
    )
    for run in found:
        client.log_metric(run.info.run_id, STAGE_SECONDS, seconds)
        if log_file.is_file():
            client.log_artifact(run.info.run_id, str(log_file), "logs")
    return [run.info.run_id for run in found]


def pipeline_run(params: Params, params_file: str, run_name: str, flow_run_id: str):
    """The parent run of one pipeline run; children attach to it through ``PARENT_ENV``. It logs the params
    of the stages that run, and every key as the resolved params file."""
    from tasks.stages import stages_for

    keys = dict.fromkeys(["experiment", *(k for s in stages_for(params) for k in s.params)])
    flow = {"prefect_flow_run_id": flow_run_id}
    return _run("pipeline", params, params_file, None, run_name=run_name, keys=keys, tags=flow)


def tuning_run(params: Params, params_file: str, run_name: str, flow_run_id: str):
    """The parent run of one arm's tuning; its trials attach to it through ``PARENT_ENV``."""
    return _run("tune", params, params_file, None, run_name=run_name, tags={"prefect_flow_run_id": flow_run_id})


def log_cached_stage(
    stage: str,
    params: Params,
    params_file: str,
    parent_run_id: str,
    flow_run_id: str,
    metrics: dict,
    metrics_files: list[str],
) -> str:
    """A child run for a stage DVC skipped: ``metrics`` (read back by the flow from its cached
    metrics files), and the files themselves as artifacts.

    Keeps every pipeline run's tree complete in the UI, marked ``dvc_cached=true``.
    """
    tags = {"dvc_cached": "true", "prefect_flow_run_id": flow_run_id}
    with _run(stage, params, params_file, parent_run_id, keys=stage_keys(stage), tags=tags) as run:
        log_summary(metrics)
        if "algorithm" in metrics:  # a training stage's: a param, as on the run that trained
            mlflow.log_param("algorithm", metrics["algorithm"])
        for path in metrics_files:
            if Path(path).is_file():
                mlflow.log_artifact(path)
        return run.info.run_id


def resolved_model(folder: str | Path, parameters: int | None) -> dict[str, Any]:
    """What the model that ran is, from its saved config (``folder``: the sft stage's output, the model every
    later stage starts from) and its parameter count: ``resolved_model.*`` params of the parent run."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return {}
    cfg = json.loads(path.read_text())
    found = {
        "arch": (cfg.get("architectures") or [cfg.get("model_type")])[0],
        "vocab_size": cfg.get("vocab_size"),
        "hidden_size": cfg.get("hidden_size"),
        "num_layers": cfg.get("num_hidden_layers"),
        "parameters": parameters,
    }
    return {f"resolved_model.{k}": v for k, v in found.items() if v is not None}
