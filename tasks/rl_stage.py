"""The RL training stages (``grpo`` and the ``ppo`` baseline) share this CLI body: arguments,
files, console, MLflow and events. The run itself is built in the core
(:func:`grpoflow.rl.run.build_rl_run`); ``tasks.grpo`` and ``tasks.ppo`` name the algorithm.

Re-running an interrupted stage continues from the last checkpoint in ``--checkpoints`` when it
was made from the same parameters, data, reference and code; otherwise training starts over.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.rl.algorithm import Algorithm
from tasks import events
from tasks.cli import EXIT_BAD_INPUT, EXIT_VERDICT, check_interrupted, run_stage_cli, stage_parser
from tasks.console import StepConsole
from tasks.notes import clock

if TYPE_CHECKING:
    from grpoflow.rl.health import HealthMonitor
    from grpoflow.rl.loop_state import LoopState
    from grpoflow.rl.run import RLRun


class History:
    """The per-step CSV that DVC plots. Its rows also travel in each checkpoint, because DVC
    deletes the stage's outputs before re-running it."""

    def __init__(self, path: Path, rows: list[dict]):
        self.path = path
        self.rows = list(rows)

    def add(self, step: int, metrics: dict, write: bool = True) -> None:
        """Append step ``step``'s metrics and (unless ``write`` is false) rewrite the file."""
        self.rows.append({k: metrics.get(k, "") for k in M.HISTORY_FIELDS} | {M.STEP: step})
        if write:
            self.write()

    def add_checkpoint_time(self, seconds: float) -> dict:
        """Book the checkpoint written after the last row into that row's split (its wall grows by
        as much); the row."""
        row = self.rows[-1]
        row[M.PHASE_CHECKPOINT] = seconds
        if row.get(M.PHASE_WALL, "") != "":
            row[M.PHASE_WALL] = float(row[M.PHASE_WALL]) + seconds
        return row

    def write(self) -> None:
        """Write every row, atomically."""
        from grpoflow.io import atomic_write

        with atomic_write(self.path) as fh:
            writer = csv.DictWriter(fh, fieldnames=M.HISTORY_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)


class StepRecorder:
    """Each step's row in the history and its metrics in MLflow (``log``). A step followed by a
    checkpoint (``due(steps done)``) is written once the checkpoint's time is in its split; its
    row is in the history before, so that the checkpoint carries it."""

    def __init__(self, history: History, log: Callable[[int, dict], None], due: Callable[[int], bool]):
        self.history, self.log, self.due = history, log, due
        self._pending: tuple[int, dict] | None = None

    def step(self, step: int, metrics: dict) -> None:
        """Record step ``step`` (0-based); written now unless a checkpoint follows it."""
        due = self.due(step + 1)
        self.history.add(step, metrics, write=not due)
        if due:
            self._pending = (step, metrics)
        else:
            self.log(step, metrics)

    def checkpoint(self, save: Callable[[], None]) -> None:
        """Run ``save``, book its seconds into the step before it, then write and log that step."""
        t0 = time.perf_counter()
        save()
        if self._pending is not None:
            (step, metrics), self._pending = self._pending, None
            row = self.history.add_checkpoint_time(time.perf_counter() - t0)
            self.history.write()
            self.log(step, metrics | {k: row[k] for k in (M.PHASE_CHECKPOINT, M.PHASE_WALL)})


def phase_split(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per phase, its mean seconds per step and its share of the mean wall, over the rows that
    have a split (rows of a run from before it had none)."""
    timed = [r for r in rows if r.get(M.PHASE_WALL, "") != ""]
    if not timed:
        return {}
    mean = {k: sum(float(r[k] or 0.0) for r in timed) / len(timed) for k in (*M.PHASES, M.PHASE_WALL)}
    wall = max(mean[M.PHASE_WALL], 1e-12)
    return {M.phase_label(k): {"mean_s": mean[k], "share": mean[k] / wall} for k in M.PHASES}


def summary(rows: list[dict], val_start: float | None, health: list[str], run) -> dict:
    """The stage's metrics JSON, from its history."""
    final = next((float(r[M.VAL_ACCURACY]) for r in reversed(rows) if r[M.VAL_ACCURACY] != ""), None)
    n, recent = max(len(rows), 1), rows[-M.RECENT_STEPS :]
    return {
        M.VAL_ACCURACY_START: val_start,
        M.VAL_ACCURACY: final,
        M.VAL_ACCURACY_GAIN: None if final is None or val_start is None else final - val_start,
        M.REWARD_MEAN_RECENT: sum(float(r[M.REWARD_MEAN]) for r in recent) / max(len(recent), 1),
        M.SECONDS_PER_STEP: sum(float(r[M.STEP_SECONDS]) for r in rows) / n,
        M.ROLLOUT_TOKENS_PER_S: sum(float(r[M.ROLLOUT_TOKENS_PER_S]) for r in rows) / n,
        M.PEAK_MEMORY_MB: max((float(r[M.PEAK_MEMORY_MB]) for r in rows), default=0.0),
        M.KL_FINAL: float(rows[-1][M.KL]) if rows and rows[-1][M.KL] != "" else None,
        M.STEPS: len(rows),
        M.HEALTH_SYMPTOMS: health,
        M.PHASE_SPLIT: phase_split(rows),
        "world_size": run.world,
        "algorithm": run.algorithm.name,
        "train_seed": run.seed,
    }


def run_note(start: float | None, end: float | None, standing: list[str], verdict: list[dict]) -> str:
    """The training run's one-line description in MLflow: "val 31.3% -> 47.3%; health ok (cleared: reward_flat)"."""
    from tasks.notes import health_text

    val = "val " + " -> ".join("n/a" if v is None else f"{v:.1%}" for v in (start, end))
    return f"{val}; {health_text(standing, verdict)}"


def _console_line(name: str, step: int, total: int, m: dict, clock: str = "") -> str:
    """One step's line: its number as MLflow, the history and the health lines have it (0-based), how many of
    ``total`` are done, ``clock`` (elapsed and left), then its metrics."""
    val = f" val_acc {m[M.VAL_ACCURACY]:.3f}" if M.VAL_ACCURACY in m else ""
    return (
        f"{name} step {step} ({step + 1}/{total} done{clock}): reward {m[M.REWARD_MEAN]:.3f} kl {m[M.KL]:.4f} "
        f"entropy {m[M.ENTROPY]:.3f} len {m[M.COMPLETION_LENGTH_MEAN]:.1f} {m[M.STEP_SECONDS]:.2f}s{val}"
    )


class Progress:
    """Elapsed time and an estimate of the time left, from the steps this process has run (a resumed run's
    earlier steps are not in its pace)."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.first, self.start = total, done, time.monotonic()

    def clock(self, step: int) -> str:
        """``, 1 min 2 s elapsed, ~4 min 10 s left`` after step ``step`` (0-based)."""
        elapsed, ran = time.monotonic() - self.start, step + 1 - self.first
        left = elapsed / ran * (self.total - step - 1) if ran > 0 else 0.0
        return f", {clock(elapsed)} elapsed, ~{clock(left)} left"


class Clearing:
    """Symptoms that stopped holding, each said once: absent for ``window`` steps in a row (the health
    monitor's own window), so that one that comes and goes is not called cleared each time it goes. Read from
    the live monitor's ``last_held``, not by replaying the history: it runs at every step."""

    def __init__(self, monitor: HealthMonitor, window: int) -> None:
        self.monitor, self.window = monitor, window
        self.said: set[str] = set()

    def cleared(self, rows: list[dict]) -> list[dict]:
        """The symptoms newly cleared at the last of ``rows`` (the history so far)."""
        if not rows:
            return []
        last = int(rows[-1]["step"])
        names = [n for n, held in self.monitor.last_held.items() if last - held >= self.window and n not in self.said]
        self.said.update(names)
        return [{"name": n, "cleared_by": self.monitor.last_held[n] + 1} for n in names]


def _preflight(rl_run, name: str, out: Path) -> None:
    """Run the preflight, report it everywhere, and stop the stage when it finds no signal at all."""
    import mlflow

    from grpoflow.io import atomic_write
    from grpoflow.rl.preflight import NONE
    from tasks import tracking

    result = rl_run.preflight()
    report = result.report()
    print(
        f"{name} preflight: {result.verdict} ({result.signal:.0%} of groups with unequal rewards, pass@G "
        f"{result.pass_at_g:.2f}, truncated {result.frac_truncated:.0%})"
        + "".join(f"\n  remedy: {r}" for r in result.remedies),
        flush=True,
    )
    events.emit(events.PREFLIGHT, name, verdict=result.verdict, report=report)
    mlflow.set_tag("preflight", result.verdict)
    tracking.log_summary(result.to_dict(), prefix="preflight/")
    mlflow.log_text(report, "preflight.md")
    if result.verdict == NONE and rl_run.params.rl.preflight.stop_on_none:
        with atomic_write(out / "report.md") as fh:  # the flow's failure report includes it
            fh.write(f"# {name.upper()} stopped before training\n\n{report}")
        message = (
            "preflight: no group of the starting policy has unequal rewards, so every advantage is 0 and "
            "training cannot learn; see the remedies above (rl.preflight.stop_on_none: false runs anyway)"
        )
        print(f"{name}: STOPPED: {message}", file=sys.stderr)
        events.emit(events.STOPPED, name, reason="no_signal", message=message)
        mlflow.set_tag("health", "no_signal")
        raise SystemExit(EXIT_VERDICT)


@dataclass(frozen=True)
class ArmHooks:
    """What an ablation arm changes in the stage: its ``stage`` and MLflow ``run_name``, ``params``
    logged beside the algorithm's (the arm), and ``scores``: its test scores of the trained policy,
    added to the metrics (first process only)."""

    stage: str
    run_name: str
    params: dict
    scores: Callable[[RLRun], dict]


@dataclass
class RunningStage:
    """What the stage's phases share: the run as resumed (:func:`_resume`), the config check's
    findings, the stage's own state from the checkpoint (None when starting over) and, on the first
    process, the history."""

    name: str
    args: argparse.Namespace
    rl_run: RLRun
    findings: list
    resumed: dict | None
    history: History | None
    before_training_mb: float = 0.0  # memory in use once the run is built, before step 1 (grpoflow.rl.memory)

    @property
    def lead(self) -> bool:
        """The first process: it prints, writes the files and logs."""
        return self.rl_run.lead

    @property
    def out(self) -> Path:
        """The stage's output folder (the exported model, report.md)."""
        return Path(self.args.out)


def run(args: argparse.Namespace, params: Params, algorithm: Algorithm, *, arm: ArmHooks | None = None) -> None:
    """Train ``algorithm`` as the stage CLI does: resume, train, export, report. An ablation arm
    passes its ``arm`` hooks (:class:`ArmHooks`)."""
    from grpoflow.models.engine import leave_distributed
    from grpoflow.rl.memory import run_models
    from tasks import tracking

    s = _resume(args, params, algorithm)
    stage, run_name = (arm.stage, arm.run_name) if arm else (s.name, None)
    with tracking.stage_run(stage, params, args.params, run_name) if s.lead else contextlib.nullcontext():
        start = time.perf_counter()
        val_start = _start(s, arm.params if arm else {})
        steps_log = tracking.StepLogger()
        _train(s, val_start, steps_log)
        models = run_models(s.rl_run)  # before the export, which merges a LoRA policy's adapters in place
        s.rl_run.export(s.out)
        # An arm scores its policy with the run's rollout engine, so before that engine is released.
        scores = arm.scores(s.rl_run) if arm and s.lead else {}
        leave_distributed(release=s.rl_run.close_rollouts)
        if s.lead:
            _report(s, val_start, start, steps_log, scores, models)


def _config_check(params: Params, name: str, world: int, lead: bool) -> list:
    """The config check's findings (printed by the first process); stop on an error."""
    from grpoflow.config.advice import format_findings, lint
    from grpoflow.models.device import describe

    findings = lint(params, name, world)
    if lead:
        print(f"{name} config check ({describe()}):\n" + format_findings(findings), flush=True)
    if any(f.level == "error" for f in findings):
        raise SystemExit(EXIT_BAD_INPUT)
    return findings


def _resume(args: argparse.Namespace, params: Params, algorithm: Algorithm) -> RunningStage:
    """Check the config, build the run and continue from its newest intact checkpoint, if any."""
    from grpoflow.models.engine import init_distributed
    from grpoflow.rl.kernels import describe_kernels
    from grpoflow.rl.memory import settled_memory_mb
    from grpoflow.rl.run import build_rl_run

    name = algorithm.name
    rank, world = init_distributed()
    findings = _config_check(params, name, world, lead=rank == 0)
    rl_run = build_rl_run(params, algorithm, data_dir=args.data, reference_dir=args.reference, seed=args.seed)
    ckpt_dir = Path(args.checkpoints)
    # Before the resume: a checkpoint brings optimizer states back, which the split counts on their own.
    before_training_mb = settled_memory_mb()
    resumed, skipped = rl_run.resume(ckpt_dir)
    if not rl_run.lead:
        return RunningStage(name, args, rl_run, findings, resumed, None)
    print(f"{name}: {describe_kernels(rl_run.engine.module).line()}", flush=True)  # what its passes run on
    for problem in skipped:
        print(f"{name}: HEALTH checkpoint skipped: {problem}", flush=True)
        events.emit(events.HEALTH, name, name="checkpoint_corrupt", evidence=problem)
    if resumed is not None:
        print(f"{name}: resuming from step {rl_run.trainer.state.step} ({ckpt_dir})", flush=True)
    history = History(Path(args.history), (resumed or {}).get("history_rows", []))
    return RunningStage(name, args, rl_run, findings, resumed, history, before_training_mb)


def _start(s: RunningStage, extra_params: dict) -> float | None:
    """Tag the MLflow run, chart the starting val accuracy at step 0 (the checkpoint's when
    resuming), run the preflight of a fresh run, and return that accuracy (None on processes
    other than the first)."""
    import mlflow

    from grpoflow.config.advice import format_findings

    rl_run, name = s.rl_run, s.name
    if s.lead:
        mlflow.set_tags(
            {
                "algorithm": name,
                "train_seed": str(rl_run.seed),
                "world_size": str(rl_run.world),
                "resumed_from_step": str(rl_run.trainer.state.step),
            }
        )
        # Params, so that MLflow's compare view shows what differs between the GRPO and PPO runs.
        mlflow.log_params({"algorithm": name, "train_seed": rl_run.seed, **extra_params})
        mlflow.log_text(format_findings(s.findings), "config_check.txt")
    val_start = (s.resumed or {}).get(M.VAL_ACCURACY_START)
    if val_start is None and s.lead:
        val_start = rl_run.evaluate(-1)[M.VAL_ACCURACY]
    if s.lead and val_start is not None:
        # The reference's score opens the validation curve at step 0, as on the run page. Logged
        # first, so that it leads the run's metrics: MLflow's compare page plots the first metric
        # the runs share, and this one's last value (the final accuracy) differs between them.
        mlflow.log_metric(M.tracked(M.VAL_ACCURACY) or M.VAL_ACCURACY, val_start, step=0)
    if s.resumed is None and rl_run.params.rl.preflight.prompts and s.lead:
        _preflight(rl_run, name, s.out)
    return val_start


def _train(s: RunningStage, val_start: float | None, steps_log) -> None:
    """Train to ``rl.steps``: each step reported (first process), each checkpoint saved with the
    stage's state; a diverged or out-of-memory run stops the stage with its verdict."""
    from grpoflow.rl.health import TrainingDiverged
    from grpoflow.rl.oom_backoff import OutOfMemoryAfterBackoff, OutOfMemoryInDistributedUpdate

    trainer = s.rl_run.trainer
    recorder = StepRecorder(s.history, steps_log.log, trainer.checkpoint_due) if s.history is not None else None
    console = StepConsole(s.name, s.rl_run.params.rl.steps, done=trainer.state.step) if s.lead else None
    try:
        trainer.train(
            on_step=_on_step(s, recorder, console),
            on_checkpoint=_on_checkpoint(s, recorder, val_start),
            evaluate=s.rl_run.evaluate,
        )
    except (TrainingDiverged, OutOfMemoryAfterBackoff, OutOfMemoryInDistributedUpdate) as exc:
        reason = "diverged" if isinstance(exc, TrainingDiverged) else "out_of_memory"
        if s.lead:
            import mlflow

            mlflow.set_tag("health", reason)
            print(f"{s.name}: STOPPED: {exc}", file=sys.stderr)
            events.emit(events.STOPPED, s.name, reason=reason, message=str(exc))
        elif isinstance(exc, OutOfMemoryInDistributedUpdate):  # this process alone knows why the run stops
            print(f"{s.name}: STOPPED: {exc}", file=sys.stderr)
            events.emit(events.STOPPED, s.name, every_rank=True, reason=reason, message=str(exc))
        raise SystemExit(EXIT_VERDICT) from None
    finally:
        if console:
            console.close()


def _on_step(
    s: RunningStage, recorder: StepRecorder | None, console: StepConsole | None
) -> Callable[[int, dict], None]:
    """The loop's per-step hook: health events, the history and MLflow, the console, progress."""
    name, total = s.name, s.rl_run.params.rl.steps
    trainer = s.rl_run.trainer
    progress = Progress(total, trainer.state.step)
    clearing = Clearing(trainer.health, trainer.health.window)

    def on_step(step: int, m: dict) -> None:
        check_interrupted()  # a Ctrl-C a finalizer swallowed stops the stage here, at a step's end
        if recorder is None or console is None:  # not the first process
            return
        for symptom in m.pop("new_symptoms"):
            console.say(
                f"{name}: HEALTH step {symptom['step']}: {symptom['name']}: {symptom['evidence']} -> "
                f"{symptom['remedy']}"
            )
            events.emit(events.HEALTH, name, **symptom)
        recorder.step(step, m)
        for cleared in clearing.cleared(recorder.history.rows):
            console.say(f"{name}: HEALTH step {step}: {cleared['name']} cleared (since step {cleared['cleared_by']})")
        shown = {k: m[k] for k in (M.REWARD_MEAN, M.KL, M.VAL_ACCURACY) if k in m}
        console.step(_console_line(name, step, total, m, progress.clock(step)), shown)
        events.emit(events.PROGRESS, name, step=step + 1, total=total)

    return on_step


def _on_checkpoint(s: RunningStage, recorder: StepRecorder | None, val_start: float | None) -> Callable:
    """The loop's checkpoint hook: the run's checkpoint, with the stage's state (the starting val
    accuracy and the history, which DVC deletes before re-running); its seconds booked by ``recorder``."""
    ckpt_dir = Path(s.args.checkpoints)

    def on_checkpoint(step: int, state: LoopState) -> None:
        def save() -> None:
            rows = s.history.rows if s.history is not None else []
            s.rl_run.save(ckpt_dir, state, {M.VAL_ACCURACY_START: val_start, "history_rows": rows})

        if recorder is not None:  # the first process: it writes the history
            recorder.checkpoint(save)
        else:
            save()

    return on_checkpoint


def _report(
    s: RunningStage, val_start: float | None, start: float, steps_log, scores: dict, models: dict[str, dict]
) -> None:
    """The stage's metrics JSON (its seconds counted from ``start``) and report.md, their MLflow
    copies, and the closing line (first process)."""
    import mlflow

    from grpoflow.config.advice import format_findings
    from grpoflow.io import atomic_write, write_json
    from grpoflow.rl.health import STANDING
    from grpoflow.rl.memory import memory_record
    from tasks import tracking

    rl_run, name, history, args = s.rl_run, s.name, s.history, s.args
    assert history is not None  # the first process's
    history.write()  # also when a finished checkpoint was resumed and no step ran
    verdict = rl_run.health.verdict(history.rows)  # symptoms that cleared do not stand as the verdict
    symptoms = sorted(v["name"] for v in verdict if v["status"] == STANDING)
    metrics = summary(history.rows, val_start, symptoms, rl_run) | {
        M.HEALTH: verdict,
        "seconds": round(time.perf_counter() - start, 1),
    }
    metrics[M.MEMORY] = memory_record(models, s.before_training_mb, metrics[M.PEAK_MEMORY_MB])
    metrics |= scores  # an ablation arm's test scores (ArmHooks.scores)
    write_json(args.metrics, metrics)
    report = (
        f"# {name.upper()} run\n\nval accuracy {val_start} -> {metrics[M.VAL_ACCURACY]}\n\n"
        f"## Config check\n\n```\n{format_findings(s.findings)}\n```\n\n## Health\n\n{rl_run.health.report(verdict)}\n"
    )
    with atomic_write(s.out / "report.md") as fh:
        fh.write(report)
    mlflow.set_tag("health", ",".join(symptoms) or "ok")
    mlflow.set_tag(tracking.NOTE, run_note(val_start, metrics[M.VAL_ACCURACY], symptoms, verdict))
    steps_log.finish()
    tracking.log_summary({k: v for k, v in metrics.items() if k not in (M.HEALTH_SYMPTOMS, M.HEALTH)})
    mlflow.log_artifact(str(s.out / "report.md"))
    mlflow.log_artifact(args.metrics)
    print(f"{name}: val accuracy {val_start} -> {metrics[M.VAL_ACCURACY]} in {metrics['seconds']} s", flush=True)


def cli(name: str, doc: str, parser: argparse.ArgumentParser | None = None) -> None:
    """The stage CLI of algorithm ``name`` (grpoflow.catalog; its module loaded after parsing, so
    --help needs no torch): its paths and their defaults come from tasks/stages.py."""
    from grpoflow.rl.algorithm import ALGORITHMS

    parser = parser or stage_parser(name, doc)
    parser.add_argument(
        "--seed", type=int, default=None, help="training seed (default: experiment.seed); data unchanged"
    )
    run_stage_cli(parser, lambda args, params: run(args, params, ALGORITHMS[name]))
