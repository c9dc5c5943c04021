"""The RL training stages (``grpo`` and the ``ppo`` baseline) share this CLI body: arguments,
files, console, MLflow and events. The run itself is built in the core
(:func:`grpoflow.rl_run.build_rl_run`); ``tasks.grpo`` and ``tasks.ppo`` name the algorithm.

Re-running an interrupted stage continues from the last checkpoint in ``--checkpoints`` when it
was made from the same parameters, data, reference and code; otherwise training starts over.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from grpoflow import metric_names as M
from grpoflow.algorithm import Algorithm
from grpoflow.config import Params
from tasks import events
from tasks.cli import EXIT_BAD_INPUT, EXIT_VERDICT, run_stage_cli, stage_parser
from tasks.console import StepConsole

if TYPE_CHECKING:
    from grpoflow.rl_run import RLRun


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
    n = max(len(rows), 1)
    return {
        M.VAL_ACCURACY_START: val_start,
        M.VAL_ACCURACY: final,
        M.VAL_ACCURACY_GAIN: None if final is None or val_start is None else final - val_start,
        M.REWARD_MEAN_LAST10: sum(float(r[M.REWARD_MEAN]) for r in rows[-10:]) / max(len(rows[-10:]), 1),
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


def _console_line(name: str, step: int, total: int, m: dict) -> str:
    val = f" val_acc {m[M.VAL_ACCURACY]:.3f}" if M.VAL_ACCURACY in m else ""
    return (f"{name} step {step + 1}/{total}: reward {m[M.REWARD_MEAN]:.3f} kl {m[M.KL]:.4f} entropy {m[M.ENTROPY]:.3f} "
            f"len {m[M.COMPLETION_LENGTH_MEAN]:.1f} {m[M.STEP_SECONDS]:.2f}s{val}")


def _preflight(rl_run, name: str, out: Path) -> None:
    """Run the preflight, report it everywhere, and stop the stage when it finds no signal at all."""
    import mlflow

    from grpoflow.io import atomic_write
    from grpoflow.preflight import NONE

    result = rl_run.preflight()
    report = result.report()
    print(f"{name} preflight: {result.verdict} ({result.signal:.0%} of groups with unequal rewards, pass@G "
          f"{result.pass_at_g:.2f}, truncated {result.frac_truncated:.0%})"
          + "".join(f"\n  remedy: {r}" for r in result.remedies), flush=True)
    events.emit(events.PREFLIGHT, name, verdict=result.verdict, report=report)
    mlflow.set_tag("preflight", result.verdict)
    mlflow.log_metrics({f"preflight/{k}": float(v) for k, v in result.to_dict().items() if isinstance(v, (int, float))})
    mlflow.log_text(report, "preflight.md")
    if result.verdict == NONE and rl_run.params.rl.preflight.stop_on_none:
        with atomic_write(out / "report.md") as fh:  # the flow's failure report includes it
            fh.write(f"# {name.upper()} stopped before training\n\n{report}")
        message = ("preflight: no group of the starting policy has unequal rewards, so every advantage is 0 and "
                   "training cannot learn; see the remedies above (rl.preflight.stop_on_none: false runs anyway)")
        print(f"{name}: STOPPED: {message}", file=sys.stderr)
        events.emit(events.STOPPED, name, reason="no_signal", message=message)
        mlflow.set_tag("health", "no_signal")
        raise SystemExit(EXIT_VERDICT)


def run(args: argparse.Namespace, params: Params, algorithm: Algorithm, *, stage: str | None = None,
        run_name: str | None = None, extra_params: dict | None = None,
        after: Callable[[RLRun], dict] | None = None) -> None:
    """Train ``algorithm`` as the stage CLI does: resume, train, export, report. An ablation arm
    passes its ``stage`` and MLflow ``run_name``, ``extra_params`` (the arm), and ``after``: its
    test scores of the trained policy, added to the metrics (first process only)."""
    from grpoflow.engine import init_distributed, leave_distributed
    from grpoflow.health import TrainingDiverged
    from grpoflow.io import atomic_write, write_json
    from grpoflow.lint import format_findings, lint
    from grpoflow.rl import LoopState, OutOfMemoryAfterBackoff
    from grpoflow.rl_run import build_rl_run
    from tasks import tracking

    name = algorithm.name
    rank, world = init_distributed()
    lead = rank == 0
    findings = lint(params, name, world)
    if lead:
        print(f"{name} config check:\n" + format_findings(findings), flush=True)
    if any(f.level == "error" for f in findings):
        raise SystemExit(EXIT_BAD_INPUT)
    rl_run = build_rl_run(params, algorithm, data_dir=args.data, reference_dir=args.reference, seed=args.seed)
    ckpt_dir, out = Path(args.checkpoints), Path(args.out)
    stage_state, skipped = rl_run.resume(ckpt_dir)
    if lead:
        for problem in skipped:
            print(f"{name}: HEALTH checkpoint skipped: {problem}", flush=True)
            events.emit(events.HEALTH, name, name="checkpoint_corrupt", evidence=problem)
        if stage_state is not None:
            print(f"{name}: resuming from step {rl_run.trainer.state.step} ({ckpt_dir})", flush=True)
    fresh = stage_state is None
    stage_state = stage_state or {}
    history = History(Path(args.history), stage_state.get("history_rows", [])) if lead else None
    total = params.rl.steps

    with tracking.stage_run(stage or name, params, args.params, run_name) if lead else contextlib.nullcontext():
        import mlflow

        start = time.perf_counter()
        if lead:
            mlflow.set_tags({"algorithm": name, "train_seed": str(rl_run.seed), "world_size": str(world),
                             "resumed_from_step": str(rl_run.trainer.state.step)})
            # Params, so that MLflow's compare view shows what differs between the GRPO and PPO runs.
            mlflow.log_params({"algorithm": name, "train_seed": rl_run.seed, **(extra_params or {})})
            mlflow.log_text(format_findings(findings), "config_check.txt")
        if fresh and params.rl.preflight.prompts and lead:
            _preflight(rl_run, name, out)
        val_start = stage_state.get(M.VAL_ACCURACY_START)
        if val_start is None and lead:
            val_start = rl_run.evaluate(-1)[M.VAL_ACCURACY]
        steps_log = tracking.StepLogger()
        recorder = StepRecorder(history, steps_log.log, rl_run.trainer.checkpoint_due) if lead else None
        console = StepConsole(name, total, done=rl_run.trainer.state.step) if lead else None

        def on_step(step: int, m: dict) -> None:
            if not lead:
                return
            for s in m.pop("new_symptoms"):
                console.say(f"{name}: HEALTH step {s['step']}: {s['name']}: {s['evidence']} -> {s['remedy']}")
                events.emit(events.HEALTH, name, **s)
            recorder.step(step, m)
            console.step(_console_line(name, step, total, m), {k: m[k] for k in (M.REWARD_MEAN, M.KL, M.VAL_ACCURACY) if k in m})
            events.emit(events.PROGRESS, name, step=step + 1, total=total)

        def on_checkpoint(step: int, state: LoopState) -> None:
            def save() -> None:
                rows = history.rows if lead else []
                rl_run.save(ckpt_dir, state, {M.VAL_ACCURACY_START: val_start, "history_rows": rows})

            if recorder is not None:  # the first process: it writes the history
                recorder.checkpoint(save)
            else:
                save()

        try:
            rl_run.trainer.train(on_step=on_step, on_checkpoint=on_checkpoint, evaluate=rl_run.evaluate)
        except (TrainingDiverged, OutOfMemoryAfterBackoff) as exc:
            reason = "diverged" if isinstance(exc, TrainingDiverged) else "out_of_memory"
            if lead:
                mlflow.set_tag("health", reason)
                print(f"{name}: STOPPED: {exc}", file=sys.stderr)
                events.emit(events.STOPPED, name, reason=reason, message=str(exc))
            raise SystemExit(EXIT_VERDICT) from None
        finally:
            if console:
                console.close()
        rl_run.export(out)
        leave_distributed()
        if not lead:
            return
        history.write()  # also when a finished checkpoint was resumed and no step ran
        symptoms = sorted(rl_run.health.symptoms)
        metrics = summary(history.rows, val_start, symptoms, rl_run) | {"seconds": round(time.perf_counter() - start, 1)}
        if after:
            metrics |= after(rl_run)
        write_json(args.metrics, metrics)
        report = (f"# {name.upper()} run\n\nval accuracy {val_start} -> {metrics[M.VAL_ACCURACY]}\n\n## Config check\n\n```\n"
                  f"{format_findings(findings)}\n```\n\n## Health\n\n{rl_run.health.report()}\n")
        with atomic_write(out / "report.md") as fh:
            fh.write(report)
        mlflow.set_tag("health", ",".join(symptoms) or "ok")
        steps_log.finish()
        tracking.log_summary({k: v for k, v in metrics.items() if k != M.HEALTH_SYMPTOMS})
        mlflow.log_artifact(str(out / "report.md"))
        mlflow.log_artifact(args.metrics)
        print(f"{name}: val accuracy {val_start} -> {metrics[M.VAL_ACCURACY]} in {metrics['seconds']} s", flush=True)


def cli(name: str, algorithm: Callable[[], Algorithm], doc: str) -> None:
    """The stage CLI of algorithm ``name`` (loaded by ``algorithm()`` after parsing): its paths and
    their defaults come from tasks/stages.py."""
    parser = stage_parser(name, doc)
    parser.add_argument("--seed", type=int, default=None, help="training seed (default: experiment.seed); data unchanged")
    run_stage_cli(parser, lambda args, params: run(args, params, algorithm()))
