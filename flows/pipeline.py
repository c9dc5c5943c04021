"""The grpoflow pipeline as a Prefect flow: every dvc.yaml stage, in order, as a Prefect task.

Each task runs ``dvc repro --single-item <stage>``: DVC decides whether the stage is stale and
caches its outputs, Prefect adds observability (logs, artifacts, retries, schedules), MLflow
gets one parent run per flow run with a child per stage. A run holds its workspace alone
(:mod:`flows.workspace`), GPU stages hold a slot of the ``gpu`` global concurrency limit, and a
successful run is saved as a DVC experiment (:mod:`flows.experiments`).

    python -m flows.pipeline --params params/default.yaml [--set rl.steps=20 ...] [--stages prepare ...]
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import yaml
from prefect import flow, get_run_logger
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.states import State

from flows import experiments, run_report, serve, summary, workspace
from flows.dag import pipeline_params_file, run_order
from flows.kept_outputs import kept_outputs
from flows.links import MLFLOW_VIEW, _mlflow_link, _mlflow_ui, run_links  # noqa: F401 - MLFLOW_VIEW: API
from flows.process_tree import reap_children
from flows.run_report import STAGE_LOGS, StageResult
from flows.set_inputs import missing_inputs, model_problem
from flows.stage_run import (
    StageFailed,
    StageInterrupted,
    StageVerdict,
    expected_failures_as_state,
    run_dvc_stage,
)
from grpoflow.config import ConfigError, Params, has_dotted, load_params, set_dotted, validate_params
from grpoflow.config.launch import DISTRIBUTED_STAGES
from grpoflow.config.yaml_edit import set_keys
from grpoflow.guard import InputError, check_params_file, clip, load_yaml, short_repr
from tasks import tracking
from tasks.cli import EXIT_INTERRUPTED, add_overrides, command_parser
from tasks.stages import REPORT_PLOTS, stages_for
from tasks.stages import STAGES as declared_stages
from tasks.stages import for_params as dvc_yaml_for
from tasks.stages import select as select_stages
from tasks.stages import stage as stage_declaration

DVC_YAML = "dvc.yaml"
REAP_GRACE_S = 10.0  # how long an interrupted run's leftover processes get to end after SIGTERM
INTERRUPTED = (
    "interrupted: the run stopped; run the same command again to go on (DVC skips the finished stages, "
    "training resumes from its last checkpoint)"
)


def hear_interrupts() -> None:
    """Make SIGINT stop this flow also where it started ignored: a non-interactive shell starts its
    background jobs so (``cmd &`` in a script, some CI runners), and Python then never raises
    KeyboardInterrupt, while each stage, which listens for it, stops: the flow would retry it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def cli_exit(exc: BaseException, interrupted: str = INTERRUPTED) -> int:
    """A flow command's one line and exit code for how it ended: a Ctrl-C (``interrupted``), bad input
    (2), or a failure the log above already reported, a gate or a stage (1)."""
    if isinstance(exc, (KeyboardInterrupt, StageInterrupted)):
        # Before the last line: a child still stopping (the stage's, Prefect's temporary server) would
        # outlive the prompt, and could print after it.
        reap_children(REAP_GRACE_S)
        print(interrupted, file=sys.stderr)
        return EXIT_INTERRUPTED
    if isinstance(exc, StageFailed) and not isinstance(exc, StageVerdict):
        # Its log tail is in the log above: the run ends on its last line, the stage, its error and its log.
        print(f"error: {str(exc).splitlines()[-1]}", file=sys.stderr)
        return 1
    print(f"error: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, ConfigError) else 1


def _check_params_file(
    params_file: str, overrides: dict[str, Any] | None = None, stages: list[str] | None = None, text: str | None = None
) -> Params:
    """The parameter set with ``overrides`` (dotted keys), validated before any work: a bad key,
    value or stage name fails here, naming it. ``text``: the file's text to check instead of what
    the file holds now (another run's edits)."""
    checked_params_file(params_file)
    try:
        params = (
            load_params(params_file, overrides) if text is None else _params_from_text(text, params_file, overrides)
        )
    except ConfigError as exc:
        if overrides:
            raise ConfigError(f"{exc}\n(with the flow's overrides {short_repr(overrides)})") from None
        raise
    # The model is first needed by sft, after the data stages: find out now, not minutes later.
    if problem := model_problem(params):
        raise ConfigError(f"{params_file}: {problem}")
    try:
        select_stages(params.experiment.stages)
    except ValueError as exc:
        raise ConfigError(f"{params_file}: {exc}") from None
    try:
        run_order(params, stages)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # A missing data file would only be noticed inside prepare, after DVC deleted its last outputs.
    if problems := missing_inputs(params, params_file):
        raise ConfigError("\n".join(problems))
    return params


def _params_from_text(text: str, params_file: str, overrides: dict[str, Any] | None) -> Params:
    """The set that ``text`` (a params file's text, journaled by another run) spells, with ``overrides``."""
    try:
        raw = load_yaml(text)
    except (InputError, yaml.YAMLError) as exc:
        raise ConfigError(f"{params_file}: not valid YAML ({clip(str(exc))})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{params_file}: expected a mapping of sections at the top level")
    for key, value in (overrides or {}).items():
        set_dotted(raw, key, value)
    return validate_params(raw, source=params_file)


def checked_params_file(params_file: str) -> str:
    """``params_file`` if it may be run: a relative path inside the checkout of ``[A-Za-z0-9._/-]`` only
    (dvc.yaml passes it to shell commands; a deployment takes it as a parameter); else :class:`ConfigError`."""
    try:
        return check_params_file(params_file)
    except InputError as exc:
        raise ConfigError(str(exc)) from None


def precheck(params_file: str, overrides: dict[str, Any] | None = None, stages: list[str] | None = None) -> None:
    """:func:`_check_params_file` before waiting for the workspace, to fail fast, busy or not. While
    another run has its parameter edits in the file, the set is checked as it was before them (the
    restore journal's text): what the check under the lock reads once that run is done."""
    checked_params_file(params_file)  # never deferred: the name alone decides
    try:
        original = workspace.original_if_edited(params_file)
        try:
            _check_params_file(params_file, overrides, stages, text=original)
        except ConfigError:
            if original is not None or not workspace.JOURNAL.exists():
                raise
            # Another run put its edits in place while this check read the file: check the text before them.
            _check_params_file(params_file, overrides, stages, text=workspace.original_if_edited(params_file))
    except workspace.CorruptJournal:  # what the file will hold is unknown: the check under the lock decides
        with contextlib.suppress(ConfigError):
            _check_params_file(params_file, overrides, stages)


def _commands(text: str) -> list[tuple[str, str | None]]:
    """Each stage of a dvc.yaml's text, in order, with its command where the set's ``launch`` decides
    it (the distributed stages; None for the others, whose hand edits a run keeps)."""
    stages = (yaml.safe_load(text) or {}).get("stages") or {}
    return [(name, (entry or {}).get("cmd") if name in DISTRIBUTED_STAGES else None) for name, entry in stages.items()]


def _wired_for(params_file: str) -> list[tuple[str, str | None]] | None:
    """The stages dvc.yaml runs, with the commands of the distributed ones, when it reads its
    parameters from ``params_file``; None when it reads another file."""
    wired = pipeline_params_file(DVC_YAML)
    if not wired or Path(wired).resolve() != Path(params_file).resolve():
        return None
    return _commands(Path(DVC_YAML).read_text())


def run_edits(params_file: str, overrides: dict[str, Any] | None) -> dict[str, str]:
    """The files this run rewrites for DVC to see what it runs: dvc.yaml, rendered for the set, its
    stages and its launch (tasks/stages.py) when the current one reads another set, runs other stages
    or launches the distributed ones otherwise (a dvc.yaml wired for the run keeps its hand edits to
    the other stages' commands); and the set itself, when there are overrides or the file leaves out
    a key a stage depends on (DVC reads those keys from the file, not from the schema).

    The set is rewritten as ``dvc exp run --set-param`` would: the user's values as they are, with
    only the overridden keys (and the missing ones, at the schema's defaults) set. DVC compares each
    params entry of dvc.yaml as a whole, a section (``model``, ``rewards``) included, so filling in
    every default would make every stage look modified once the user's own text is back."""
    changes: dict[str, str] = {}
    params = load_params(params_file, overrides)
    stages = stages_for(params)
    generated = dvc_yaml_for(params_file, params)
    if _wired_for(params_file) != _commands(generated):
        # Another set, another choice of stages or arms, or another launch (launch.*: torchrun or not):
        # dvc.yaml is generated, so the same text for them, and a training stage runs as `dvc repro` runs it.
        changes[DVC_YAML] = generated
    text = Path(params_file).read_text()
    raw = load_yaml(text) or {}
    edited, values = copy.deepcopy(raw), dict(overrides or {})
    for key, value in values.items():
        set_dotted(edited, key, value)
    dumped = params.model_dump(mode="json")
    for key in dict.fromkeys(k for s in stages for k in s.params):
        if not has_dotted(edited, key):  # DVC fails on a params key the file lacks: its default, written out
            values[key] = _dotted_value(dumped, key)
            set_dotted(edited, key, values[key])
    if edited != raw:  # the set's own text and comments kept (dvc exp apply brings this text back)
        header = f"# {params_file} as one flow run ran it; overrides: {json.dumps(overrides or {})}\n"
        changes[params_file] = header + set_keys(text, values)
    return changes


def _dotted_value(tree: dict[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``rl.sampling.temperature``) in a nested mapping."""
    node: Any = tree
    for part in dotted.split("."):
        node = node[part]
    return node


def _metrics_markdown(results: list[StageResult]) -> str:
    parts = ["# grpoflow pipeline\n"]
    for r in results:
        flat = tracking.numeric_metrics(r.metrics)
        rows = "\n".join(f"| {k} | {v:g} |" for k, v in sorted(flat.items()))
        state = "ran" if r.ran else "cached by DVC"
        parts.append(f"## {r.stage} ({state}, {r.seconds:.1f} s)\n\n| metric | value |\n|---|---|\n{rows}\n")
    return "\n".join(parts)


def publish_to_mlflow(
    results: list[StageResult], title: str, experiment_id: str, parent_id: str, params_file: str, links: dict[str, str]
) -> str:
    """reports/run.html, and the headline on the active MLflow parent run (the resolved model's
    parameters, metrics, description, the page and the comparison's plots as artifacts); the run is
    recorded as the one ``make ui`` opens next and the summary links. The headline's text."""
    import mlflow

    # A smoke run's page links nowhere (links.run_links): its MLflow store goes with its scratch copy.
    summary.record_last_run(params_file, experiment_id, parent_id, links.get("MLflow parent run", ""))
    sft = stage_declaration("sft")
    parameters = json.loads(Path(sft.file("metrics")).read_text()) if Path(sft.file("metrics")).is_file() else {}
    mlflow.log_params(tracking.resolved_model(sft.file("out"), parameters.get("parameters")))
    head = run_report.write(results, title, params_file=params_file, links=links)
    text = run_report.log_headline(head)
    mlflow.log_artifact(str(run_report.REPORT))
    compare_report = Path(stage_declaration("compare").file("out")) / "report.html"
    for path in (compare_report, *map(Path, REPORT_PLOTS)):
        if path.is_file():
            mlflow.log_artifact(str(path), artifact_path="compare")
    return text


def _publish_run_report(
    results: list[StageResult], title: str, experiment_id: str, parent_id: str, params_file: str, flow_run_id: str
) -> None:
    """:func:`publish_to_mlflow`, and the page and the headline in Prefect (a link and a markdown artifact)."""
    links = run_links(experiment_id, parent_id, flow_run_id)
    text = publish_to_mlflow(results, title, experiment_id, parent_id, params_file, links)
    page = run_report.REPORT.resolve()
    create_link_artifact(
        page.as_uri(),
        link_text=str(page),
        key="run-report",
        description="This run on one page (open the file in a browser; also `run.html` in the MLflow parent run)",
    )
    create_markdown_artifact(
        f"# {title}\n\n{text}\n\nReport: `{page}`; MLflow: {_mlflow_link(experiment_id, parent_id)}",
        key="run-headline",
        description="The run's result",
    )


def _gpu_limit(name: str | None) -> str | None:
    """``name`` if the server has that global concurrency limit; else None, said once. (Acquiring
    a missing limit costs seconds per stage and guards nothing: e.g. Prefect's temporary server.)"""
    if not name or serve.on_temporary_server():  # one flow run alone on its server: nothing to throttle
        return None
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
            return name
        except ObjectNotFound:
            get_run_logger().warning(
                f"no global concurrency limit {name!r} on this Prefect server: GPU stages run "
                f"unthrottled (`make serve` creates it; or `prefect gcl create {name} --limit N`)"
            )
            return None


def _record_experiment(
    params: Params,
    params_file: str,
    overrides: dict | None,
    parent_id: str,
    experiment_id: str,
    whole: bool,
    stage_seconds: dict[str, float],
) -> None:
    """Save this run as a DVC experiment naming its MLflow run and each stage's wall time (only a
    ``whole`` run: an experiment is the full pipeline's state), tag the MLflow run with the
    experiment, and push the cached outputs to the DVC remote when one is configured."""
    import mlflow

    orch = params.orchestration
    name = experiments.experiment_name(flow_run.name or "local", str(flow_run.id or parent_id))
    tags = {"data_hash": tracking.data_hash()}
    if orch.record_experiment and not whole:
        print("a run of some stages only is not saved as a DVC experiment")
    if orch.record_experiment and whole:
        rev = experiments.record(
            name,
            {
                "mlflow_run_id": parent_id,
                "mlflow_experiment_id": experiment_id,
                "prefect_flow_run_id": str(flow_run.id),
                "prefect_flow_run_name": flow_run.name,
                "params_file": params_file,
                "overrides": overrides or {},
                "git_commit": tracking.provenance_tags(params, params_file)["git_commit"],
                "stage_seconds": stage_seconds,  # the one duration of each stage (the page's, MLflow's)
            },
            list(stage_seconds),
        )
        tags |= {"dvc_experiment": name, "dvc_experiment_rev": rev}
        print(f"saved as DVC experiment {name} ({rev[:7]}): `dvc exp apply {name}` then `dvc repro` reproduces it")
    if orch.dvc_remote and whole:
        tags["dvc_remote"] = orch.dvc_remote
        print(f"dvc push --remote {orch.dvc_remote}: {experiments.push(orch.dvc_remote)}")
    mlflow.set_tags(tags)  # on the parent run, still active


def _finish_stage_runs(parent_id: str, since_ms: int, seconds: float, name: str) -> None:
    """The stage's duration and log on its MLflow runs (:func:`tasks.tracking.finish_stage_runs`); a
    failure to write them is a warning, never the stage's verdict."""
    try:
        tracking.finish_stage_runs(parent_id, since_ms, seconds, STAGE_LOGS / f"{name}.log")
    except Exception as exc:  # noqa: BLE001 - MLflow unreachable, say: the stage's own result stands
        get_run_logger().warning(f"{name}: its log and duration could not be added to MLflow ({exc})")


def _announce_parent_run(experiment_id: str, parent_id: str, params_file: str) -> None:
    """Print and link the MLflow parent run, saying where it can be opened."""
    served = (
        "in the smoke run's scratch copy, deleted once it ends"
        if summary.smoke_kept_in()
        else f"served by `{summary.ui_command(params_file)}`"
    )
    print(f"MLflow run: {_mlflow_link(experiment_id, parent_id)} ({served})")
    create_link_artifact(
        _mlflow_link(experiment_id, parent_id),
        link_text="MLflow parent run",
        key="mlflow-run",
        description=f"This run's MLflow parent run, in {_mlflow_ui()[1]}",
    )


def run_stages(params: Params, params_file: str, stages: list[str] | None, overrides: dict | None = None):
    """Run dvc.yaml stages under one MLflow parent run, record the run as a DVC experiment, and
    publish the stage table, metrics and MLflow link.
    Shared by the pipeline and ablation flows; the caller holds the workspace."""
    order = run_order(params, stages)
    orch = params.orchestration
    flow_run_id = str(flow_run.id or "none")
    results: list[StageResult] = []
    stage_task = run_dvc_stage.with_options(retries=orch.stage_retries, retry_delay_seconds=orch.retry_delay_seconds)
    gpu_limit = _gpu_limit(orch.gpu_concurrency_limit)
    with tracking.pipeline_run(
        params, params_file, f"{flow_run.flow_name or 'pipeline'}-{flow_run.name or 'local'}", flow_run_id
    ) as parent:
        parent_id = parent.info.run_id
        experiment_id = parent.info.experiment_id
        _announce_parent_run(experiment_id, parent_id, params_file)
        env = {tracking.PARENT_ENV: parent_id, tracking.FLOW_RUN_ENV: flow_run_id}
        for stage in order:
            gpu = gpu_limit if stage.name in orch.gpu_stages else None
            since_ms, start, result = int(time.time() * 1000), time.perf_counter(), None
            try:
                with kept_outputs(stage):
                    # The task returns a StageResult; State.result() is typed for any state it may hold.
                    result = cast(
                        StageResult,
                        stage_task(stage, env, gpu_limit=gpu, retries=orch.stage_retries, return_state=True).result(),
                    )
                if not result.ran:
                    tracking.log_cached_stage(
                        stage.name, params, params_file, parent_id, flow_run_id, result.metrics, list(stage.metrics)
                    )
            finally:  # a failed stage's log goes to its run too: that is where it is looked for
                seconds = result.seconds if result else round(time.perf_counter() - start, 2)
                _finish_stage_runs(parent_id, since_ms, seconds, stage.name)
            results.append(result)
        try:
            _publish_run_report(results, parent.info.run_name, experiment_id, parent_id, params_file, flow_run_id)
        except Exception as exc:  # the stages' results are intact and get recorded: a report is not worth failing them
            get_run_logger().warning(
                f"the run's report could not be written ({type(exc).__name__}: {exc}); "
                "every stage's outputs, metrics and MLflow runs are in place"
            )
        whole = {s.name for s in order} == {s.name for s in run_order(params)}
        walls = {r.stage: r.seconds for r in results}
        _record_experiment(params, params_file, overrides, parent_id, experiment_id, whole, walls)
    create_table_artifact(
        [{"stage": r.stage, "status": "ran" if r.ran else "cached", "seconds": r.seconds} for r in results],
        key="pipeline-stages",
        description="Stages of this pipeline run",
    )
    create_markdown_artifact(_metrics_markdown(results), key="pipeline-metrics", description="Stage metrics")
    return results


@contextlib.contextmanager
def workspace_for_run(
    holder: str,
    params_file: str,
    overrides: dict[str, Any] | None,
    stages: list[str] | None = None,
    log: Callable[[str], None] = print,
    poll_s: float = 2.0,
) -> Iterator[Params]:
    """This workspace for ``holder`` alone, with its parameter edits in place; yields the set as it
    will run, validated while the lock is held (before it, another run's edits may be in the files)."""
    with workspace.exclusive(holder, log=log, poll_s=poll_s):
        params = _check_params_file(params_file, overrides, stages)
        with workspace.edits(run_edits(params_file, overrides), log=log):
            yield params


@contextlib.contextmanager
def held_workspace(
    params_file: str, overrides: dict[str, Any] | None, stages: list[str] | None = None
) -> Iterator[Params]:
    """:func:`workspace_for_run` for this flow run, logging to it."""
    with workspace_for_run(
        f"{flow_run.name} ({flow_run.id})", params_file, overrides, stages, log=get_run_logger().info
    ) as params:
        yield params


@flow(name="grpoflow-pipeline", log_prints=True)
@expected_failures_as_state
def pipeline(
    params_file: str = "params/default.yaml", overrides: dict[str, Any] | None = None, stages: list[str] | None = None
) -> list[StageResult] | State:
    """Run the dvc.yaml stages (all, or ``stages`` in DAG order) for one parameter set, with
    ``overrides`` ({"rl.steps": 20}) validated against the schema before anything runs."""
    precheck(params_file, overrides, stages)
    with held_workspace(params_file, overrides, stages) as params:
        results = run_stages(params, params_file, stages, overrides=overrides)
    # In the flow's log, not only on the command line: a deployment's run with overrides leaves dvc status so too.
    if note := experiments.overrides_note(overrides, [r.stage for r in results]):
        print(note)
    return results


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["rl.steps=20", "rl.sampling.temperature=0.7"]`` -> dotted keys with YAML-typed values."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {short_repr(item)}: expected KEY=VALUE, e.g. rl.steps=20")
        try:
            out[key.strip()] = load_yaml(value)  # no anchors or aliases, as in a params file
        except (InputError, yaml.YAMLError) as exc:
            raise ConfigError(f"override {short_repr(item)}: not a YAML value ({clip(str(exc))})") from None
    return out


EXAMPLES = """examples:
  python -m flows.pipeline                                      # the tiny default, every stage
  python -m flows.pipeline --smoke                              # every stage at the smallest sizes, in a scratch copy
  python -m flows.pipeline --params params/smollm2-135m.yaml    # a real instruct model on CPU
  python -m flows.pipeline --set rl.steps=20 rl.sampling.temperature=0.7
  python -m flows.pipeline --stages prepare validate_verifiers
  python -m flows.pipeline --params params/smollm2-135m.yaml --smoke   # a GPU set rehearsed on CPU
"""


def stages_epilog() -> str:
    """The help's list of stages: those every set runs, then the opt-in ones, marked as such (a set
    that does not ask for one refuses it as unknown)."""
    always = " ".join(s.name for s in declared_stages if not s.opt_in)
    opt_in = " ".join(s.name for s in declared_stages if s.opt_in)
    return (
        f"stages, in order: {always}\n"
        f"opt-in stages, run only where the set asks for them (experiment.stages; reward_model also for "
        f"rewards: [{{name: rm}}]): {opt_in}"
    )


def main(argv: list[str] | None = None) -> int:
    names = [s.name for s in declared_stages]
    parser = command_parser("flows.pipeline", __doc__, epilog=EXAMPLES + "\n" + stages_epilog())
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    add_overrides(parser)
    parser.add_argument(
        "--stages",
        nargs="*",
        default=None,
        choices=names,
        metavar="STAGE",
        help="only these stages (run in DAG order; listed below)",
    )
    parser.add_argument(
        "--smoke",
        "--rehearse",
        dest="smoke",
        action="store_true",
        help="run every stage of the set at the smallest sizes that exercise it, in a scratch copy of the "
        "checkout: nothing here changes (flows/rehearse.py; --rehearse is the same)",
    )
    args = parser.parse_args(argv)
    hear_interrupts()
    try:
        overrides = parse_overrides(args.overrides)
        precheck(args.params, overrides, args.stages)  # before the Prefect server starts: bad input fails in a second
        if args.smoke:
            from flows.rehearse import rehearse

            return rehearse(args.params, overrides or None, args.stages)
        with serve.prefect_api():
            # A Failed state the flow returns comes back raised, as its exception.
            results = cast(
                list[StageResult], pipeline(params_file=args.params, overrides=overrides or None, stages=args.stages)
            )
    except (ConfigError, StageFailed, KeyboardInterrupt) as exc:  # a verdict's report is in the log above
        return cli_exit(exc)
    print(summary.run_summary(results, load_params(args.params, overrides), args.params), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
