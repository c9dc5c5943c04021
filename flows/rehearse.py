"""A smoke run (a rehearsal): every stage of a parameter set at smoke scale, in a scratch copy of the
checkout, with the set's own model, tokenizer, prompt style, rewards and engine settings. The tiny
default runs end to end in minutes, SFT included; a GPU set's mistakes (prompt style, batch
arithmetic, a verifier on real data, a missing model) show up on a CPU before a cluster job is spent.

The smoke sizes are one named bundle of overrides (:data:`SMOKE`), applied on top of the set and of
``--set`` as a run's overrides are. The run happens in the copy, so the workspace's params, outputs,
DVC cache and lock, MLflow store and DVC experiments are not touched: a smoke run never replaces the
results of a real one. The copy shares the checkout's DeepSpeed op cache (no rebuild per run).

    python -m flows.pipeline --smoke [--params params/smollm2-135m.yaml] [--set model.name_or_path=...]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from flows.process_tree import stop_tree
from flows.summary import SMOKE_KEPT_ENV as KEPT_ENV
from grpoflow import catalog
from grpoflow.config import load_params, set_dotted
from grpoflow.config.rules import launched_world_size
from grpoflow.provenance import copy_checkout
from tasks.cli import EXIT_INTERRUPTED

# What makes a run smoke-sized; everything else stays the set's own.
SMOKE: dict[str, Any] = {
    "data.synthetic.num_examples": 300,
    "data.synthetic_code.num_examples": 300,
    "reward_model.prompts": 16,  # the opt-in reward_model stage, where the set runs it
    "reward_model.epochs": 0.5,
    # A reward model trained at these sizes cannot promise quality: its gate is computed, not enforced.
    "verifier_gate.min_rm_accuracy": 0.0,
    "verifier_gate.min_rm_win_rate": 0.0,
    "verifier_gate.max_examples": 40,
    "sft.epochs": 0.1,
    "sft.eval_examples": 4,
    "rl.steps": 2,
    "rl.checkpoint_every": 2,  # one checkpoint, at the last step
    "rl.eval_every": 2,
    "rl.preflight.prompts": 2,
    "rl.preflight.stop_on_none": False,
    "evaluate.max_examples": 4,
    "evaluate.n_samples": 1,
    "evaluate.k": 1,
    "orchestration.record_experiment": False,
    "orchestration.dvc_remote": None,
    "orchestration.stage_retries": 0,
    # make tune at smoke size: two short trials per arm
    "tune.trials": 2,
    "tune.steps": 2,
    "tune.eval_every": 1,
    **catalog.smoke_overrides(),  # each algorithm's own, from its spec (grpoflow/algorithms/<name>/)
}
KEPT_DIR = ".grpoflow/smoke"  # where a smoke run's page and metrics stay, one folder per set (and flow: kept_dir)
# What a smoke run keeps, as glob patterns under its copy. The last: a smoke tune's trial logs (flows/tune_study.py's
# TUNE_DIR, spelled out: that module imports Optuna), which a failed trial's error names; not their data view.
KEPT_RESULTS = (
    "reports",
    "metrics",
    "data/prepared/report.md",
    "data/prepared/quarantine.jsonl",
    ".grpoflow/tune/*/t*/trial.log",
)
SOURCE_ROWS = 300  # rows read from each file or hub source (benchmarks: a sixth of it)
# Processes a rehearsal launches at most (one node, gloo on a CPU): two already take every
# distributed path (sharding, all-reduce, rank 0 alone writing); more would only queue on the cores.
REHEARSAL_PROCESSES = 2
# Where this checkout's stages keep DeepSpeed's compiled CPU ops when TORCH_EXTENSIONS_DIR is not set
# (grpoflow.models.engine.EXTENSIONS_DIR, spelled out: that module imports torch). The scratch copy
# has none of its own, and building them again costs minutes.
OP_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "torch_extensions"


def smoke_params(params_file: str, overrides: dict[str, Any] | None, after: dict[str, Any] | None = None) -> dict:
    """The set's raw params with the user's overrides, shrunk to smoke scale; then ``after`` (dotted
    keys a caller sets over the smoke sizes, e.g. benchmarks/gpu_check.py's steps and batch)."""
    raw = yaml.safe_load(Path(params_file).read_text())
    for key, value in {**(overrides or {}), **SMOKE}.items():
        set_dotted(raw, key, value)
    data = raw.setdefault("data", {})
    for key, rows in (("sources", SOURCE_ROWS), ("benchmarks", SOURCE_ROWS // 6)):
        for source in data.get(key) or []:
            source["limit"] = min(source.get("limit") or rows, rows)
    params = load_params_from(raw, params_file)
    world = _cap_launch(raw, params)
    rl = raw.setdefault("rl", {})
    # Two prompts per process and a short completion keep a big set's step to seconds on a CPU;
    # G, the engines and everything else stay as the set has them.
    rl["prompts_per_step"] = min(params.rl.prompts_per_step // launched_world_size(params), 2) * world
    rl.setdefault("sampling", {})["max_completion_length"] = min(params.rl.sampling.max_completion_length, 32)
    rl.setdefault("engine", {})["micro_batch_size"] = 2 * params.rl.num_generations
    for key, value in (after or {}).items():
        set_dotted(raw, key, value)
    return raw


def _cap_launch(raw: dict, params) -> int:
    """Shrink the set's launch in ``raw`` to at most :data:`REHEARSAL_PROCESSES` processes on this
    machine (a local rendezvous); the processes its training stages will run on. A set of several
    nodes keeps several: one process on each of two agents (``launch.local_nodes``), so that the
    rehearsal meets the rendezvous of nodes, not only of processes."""
    launch = params.launch
    capped = min(launch.world_size, REHEARSAL_PROCESSES)
    nodes = min(launch.nnodes, capped)
    if launch.world_size > 1:
        raw["launch"] = {
            **(raw.get("launch") or {}),
            "nproc_per_node": capped // nodes,
            "nnodes": nodes,
            "rdzv_backend": "c10d",
            "rdzv_endpoint": None,
            "local_nodes": nodes > 1,
        }
    if launch.kubernetes.enabled:  # a rehearsal runs on this machine, not as a Job on the cluster
        set_dotted(raw, "launch.kubernetes.enabled", False)
    return capped if launched_world_size(params) > 1 else 1


def _nodes(launch) -> str:
    if launch.nnodes == 1:
        return "one node"
    return f"{launch.nnodes} nodes of {launch.nproc_per_node} process(es), their agents all here"


def launch_note(full, smoke) -> str | None:
    """The line that says how many processes the rehearsal launches, against the set's (None: one, as the set)."""
    was, now = full.launch, smoke.launch
    if was == now and now.world_size == 1:
        return None
    return (
        f"smoke run: the set's launch of {was.world_size} processes (launch.nproc_per_node={was.nproc_per_node} x "
        f"launch.nnodes={was.nnodes}) runs as {now.world_size} on this machine ({_nodes(now)}; gloo on a CPU), "
        f"{smoke.rl.prompts_per_step // launched_world_size(smoke)} prompt(s) per process"
    )


def load_params_from(raw: dict, source: str):
    """Validate ``raw`` as a params file would be."""
    from grpoflow.config import validate_params

    return validate_params(raw, source=source)


def rehearse(
    params_file: str,
    overrides: dict[str, Any] | None,
    stages: list[str] | None,
    *,
    keep: bool = False,
    after: dict[str, Any] | None = None,
    scratch: Path | None = None,
    flow: tuple[str, ...] = ("flows.pipeline",),
) -> int:
    """Run the pipeline on the smoke version of ``params_file`` (then ``after``, :func:`smoke_params`)
    in a scratch copy (under ``scratch``: its ``project``; default a new temporary directory); its exit code.
    ``flow`` is the module and its own arguments (``flows.tune --arms grpo``): the pipeline by default."""
    full = load_params(params_file, overrides)  # the set itself must validate first, with its own numbers
    raw = smoke_params(params_file, overrides, after)
    if note := launch_note(full, load_params_from(raw, f"{params_file} (rehearsal)")):
        print(note, flush=True)
    scratch = scratch or Path(tempfile.mkdtemp(prefix="grpoflow-rehearsal-"))
    project = copy_checkout(Path.cwd(), scratch / "project")
    rel = Path(params_file)
    if rel.is_absolute():
        rel = rel.resolve().relative_to(Path.cwd().resolve())
    (project / rel).write_text(f"# rehearsal of {params_file}\n" + yaml.safe_dump(raw, sort_keys=False))
    shrink_overlays(project / "params" / "tuned")
    git = ["git", "-c", "user.email=rehearsal@grpoflow.local", "-c", "user.name=rehearsal"]
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "rehearsal"]):
        subprocess.run(cmd, cwd=project, check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "PREFECT_API", "GRPOFLOW_"))}
    env["PREFECT_HOME"] = str(scratch / "prefect-home")
    kept = kept_dir(params_file, flow)
    if not keep:  # the run's closing lines name where its page will be kept, not the copy deleted after it
        env[KEPT_ENV] = str(kept.resolve())
    env.setdefault("TORCH_EXTENSIONS_DIR", str(OP_CACHE))  # the user's choice (the Makefile's) wins
    what = smoke_label(params_file, flow)
    print(f"{what} in a scratch copy, {project}", flush=True)
    cmd = [sys.executable, "-m", *flow, "--params", str(rel), *(["--stages", *stages] if stages else [])]
    try:
        code = run_flow(cmd, project, env)
    except KeyboardInterrupt:  # the flow and all it started are stopped: its scratch copy goes too
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
        gone = f"; its workspace is kept at {project}" if keep else "; its scratch copy is removed"
        print(f"{what}: interrupted{gone} (a smoke run starts over when run again)", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    print(
        f"{what}: {'passed' if code == 0 else f'FAILED (exit {code})'}"
        + (f"; its workspace is kept at {project}" if keep else ""),
        flush=True,
    )
    if not keep:
        print(kept_results_line(keep_results(project, kept)), flush=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return code


# How long the rehearsed flow gets to stop after each signal: its clean stop ends the stage and records the run.
STOP_GRACE_S = 30.0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the rehearsal waits, so that it stops what it started as Ctrl-C does."""


def _terminated(signum, frame) -> None:
    raise Terminated


def run_flow(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Run the rehearsed flow to its end; its exit code. On Ctrl-C or SIGTERM the flow and every process
    below it are stopped before this raises (SIGINT to the flow, its clean stop; then SIGTERM and SIGKILL
    to all of them): left to themselves, a stage's training went on in the scratch copy after the
    command had ended."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env)
    main = threading.current_thread() is threading.main_thread()  # where Python lets a handler be set
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        return proc.wait()
    except KeyboardInterrupt as exc:
        # The flow first, alone: its clean stop ends its stage, records the run on its Prefect server and
        # then stops what it started. A terminal's Ctrl-C reached it already; SIGTERM did not.
        if isinstance(exc, Terminated):
            proc.send_signal(signal.SIGINT)
        stop_tree(proc, STOP_GRACE_S, (None, signal.SIGTERM, signal.SIGKILL))
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def shrink_overlays(tuned: Path) -> None:
    """The scratch copy's tuned overlays without the keys the smoke bundle sizes (a critic warm-up of 14
    steps in a run of 2): the smoke ablation still applies every other tuned setting."""
    from grpoflow.tuning.overlay import without

    for path in sorted(tuned.glob("*.yaml")) if tuned.is_dir() else []:
        # Its header and tuned_with record kept: the smoke run names the budget it was tuned on.
        text = without(path, SMOKE)
        if text:
            path.write_text(text)
        else:
            path.unlink()


def smoke_label(params_file: str, flow: tuple[str, ...]) -> str:
    """How the console names a smoke run of ``flow``: in the words of the make targets that start one
    (``make smoke``; ``make ablation SMOKE=1``), not the flows' ``--rehearse``."""
    kind = _kind(flow)
    return f"smoke {'run' if kind == 'pipeline' else kind} of {params_file}"


def _kind(flow: tuple[str, ...]) -> str:
    """The flow's module name alone: pipeline, ablation, tune."""
    return flow[0].removeprefix("flows.")


def kept_dir(params_file: str, flow: tuple[str, ...]) -> Path:
    """Where a smoke run of ``flow`` on ``params_file`` keeps its results: ``.grpoflow/smoke/<set>/`` for the
    pipeline, ``.grpoflow/smoke-ablation/<set>/`` and ``.grpoflow/smoke-tune/<set>/`` for the others, so that
    one flow's page never stands for another's (a suffix on the set's name could meet another set's name)."""
    kind = _kind(flow)
    return Path(KEPT_DIR if kind == "pipeline" else f"{KEPT_DIR}-{kind}") / Path(params_file).stem


def keep_results(project: Path, dest: Path) -> Path:
    """Copy what a user opens after a run (the run page, the metrics, the data report and quarantine) from the
    scratch copy to ``dest`` in this workspace (under .grpoflow/, which git ignores), in place of what the last
    smoke run of the same set and flow kept there: a failed run's folder holds no page of an earlier one that
    passed. Its absolute path."""
    dest = dest.resolve()
    shutil.rmtree(dest, ignore_errors=True)
    for src in (found for pattern in KEPT_RESULTS for found in sorted(project.glob(pattern))):
        rel = src.relative_to(project)
        if src.is_dir():
            shutil.copytree(src, dest / rel, dirs_exist_ok=True)
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def kept_results_line(dest: Path) -> str:
    """Where the smoke run's results are now, and what was not kept."""
    page, logs = dest / "reports" / "run.html", dest / "reports" / "logs"
    if not any(p.is_file() and p.name != ".gitignore" for p in dest.rglob("*")):
        # The tracked .gitignore files alone: it stopped before a stage ran, and its output above says why.
        return f"the smoke run stopped before its first stage: nothing to keep ({dest} is empty)"
    where = f"its run page: {page}" if page.is_file() else f"its stage logs: {logs}" if logs.is_dir() else dest
    return (
        f"smoke results kept in {dest} ({where}; metrics in {dest / 'metrics'}); the MLflow run, models and DVC "
        "outputs were the scratch copy's and are gone"
    )


def add_smoke(parser, untouched: str, flow: str) -> None:
    """A flow's ``--smoke``: the same run at smoke size in a scratch copy; ``untouched`` names what it leaves,
    ``flow`` the flow's module."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"run at the smallest sizes that exercise it (flows/rehearse.py's bundle) in a scratch copy of the "
        f"checkout: {untouched} and the workspace's outputs are not touched; its report and metrics are kept in "
        f"{kept_dir('<set>', (flow,))}/",
    )
