"""One pipeline stage run from the flow: ``dvc repro --single-item <stage>`` as a Prefect task.

The stage command's output streams into the Prefect log (credentials redacted, DVC's git advice
hidden), its events file (:mod:`tasks.events`) feeds a progress artifact and the failure
diagnosis, an interrupted flow stops the command it started, and a failure a retry would repeat
(:class:`StageVerdict`) is not retried.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, TypeVar, cast

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.concurrency.sync import concurrency
from prefect.runtime import task_run
from prefect.states import Completed, Failed, State

from flows import lineage, workspace
from flows.node_lines import OTHER_NODE
from flows.process_tree import stop_tree
from flows.run_report import STAGE_LOGS, StageResult
from flows.stage_errors import StageFailed, StageInterrupted, StageVerdict  # the flows import them from here too
from grpoflow.config import ConfigError
from grpoflow.guard import redact_text
from tasks import events
from tasks.cli import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_VERDICT
from tasks.stages import Stage

P = ParamSpec("P")
R = TypeVar("R")

STAGE_GRACE_S = 10.0  # for a stage command to stop by itself, before each firmer signal
EVENTS_DIR = workspace.STATE_DIR / "events"  # one file per stage command while it runs


def _worth_retrying(task, task_run, state) -> bool:
    """Prefect's retry condition: everything but a :class:`StageVerdict`."""
    return not isinstance(state.data, StageVerdict)


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


class DvcAdvice:
    """DVC's advice after each stage (git add dvc.lock, autostage, dvc push): the flow saves each run
    as a DVC experiment instead, and the README says what to commit; repeated after every stage, it
    buries the log. Only the lines of that block are hidden."""

    START, END = "To track the changes with git, run:", "Use `dvc push` to send your updates to remote storage."
    INSIDE = ("git add ", "To enable auto staging, run:", "dvc config core.autostage true")

    def __init__(self) -> None:
        self.inside = False

    def hides(self, line: str) -> bool:
        """Whether ``line`` (non-empty) belongs to the advice."""
        text = line.strip()
        if text in (self.START, self.END):
            self.inside = text == self.START
            return True
        self.inside = self.inside and text.startswith(self.INSIDE)
        return self.inside


ENGINE_CONFIG_KEYS = ("model", "dtype", "max_seq_len", "device_config", "enforce_eager", "tensor_parallel_size", "seed")


def engine_config_line(line: str) -> str:
    """vLLM's engine start prints its whole config on one line (2-3 KB); the stage log keeps what matters of it
    (:data:`ENGINE_CONFIG_KEYS`), other lines as they are."""
    head, found, config = line.partition(" with config: ")
    if not found or len(line) < 500:
        return line
    values = dict(re.findall(r"(?:^|, )(\w+)=('[^']*'|[^,]*)", config))
    kept = ", ".join(f"{k}={values[k]}" for k in ENGINE_CONFIG_KEYS if k in values)
    return f"{head} with config: {kept} (the rest of its {len(config)} characters left out)"


class EngineNoise:
    """The engines' start-up chatter: vLLM's and DeepSpeed's INFO/WARNING log lines (a vLLM engine
    start prints its whole config on one line of about 3,000 characters, and the same thread
    warning again and again), torch's C++ warnings (NUMA binding), library warnings from
    site-packages with the source line Python prints under them, and weight-loading progress bars.
    The stage's full log file keeps them; the flow's console shows the stage's own lines, and every
    ERROR line whatever its source."""

    PATTERNS = (
        re.compile(r"^(\([\w-]+ pid=\d+\) )?(DEBUG|INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \["),  # vLLM
        re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] \[(DEBUG|INFO|WARNING)\]"),  # DeepSpeed
        re.compile(r"^Loading safetensors checkpoint shards:"),
        re.compile(r"^Triton is installed, but"),
        re.compile(r"^(\[rank\d+\]:)?\[[IW]\d{4} \d\d:\d\d:\d\d\.\d+ \S+:\d+\] "),  # torch's C++ (c10) lines
    )
    LIBRARY_WARNING = re.compile(r"^/\S+/(site|dist)-packages/\S+:\d+: \w*Warning")

    def __init__(self) -> None:
        self.after_warning = False

    def hides(self, line: str) -> bool:
        """Whether ``line`` (non-empty) is engine chatter, also another node's (flows/local_nodes.py)."""
        line = OTHER_NODE.sub("", line, count=1)
        if self.after_warning and line.startswith("  "):  # the source line under a library warning
            return True
        self.after_warning = bool(self.LIBRARY_WARNING.match(line))
        return self.after_warning or any(p.match(line) for p in self.PATTERNS)


@dataclass
class StageLog:
    """What an operator needs from a stage: its output's tail, its exit code, whether its command
    ran (DVC may skip it), and every health or stop event it reported."""

    code: int = 0
    stage_code: int | None = None  # the stage command's own exit code (DVC exits 1 whatever it was)
    ran: bool = False
    tail: list[str] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)


class _Progress:
    """A Prefect progress artifact fed by the stage's progress events."""

    def __init__(self, stage: str):
        self.key, self.percent = f"{stage.replace('_', '-')}-progress", -1
        self.artifact: uuid.UUID | None = None

    def update(self, event: dict) -> None:
        """Move the bar to ``step / total`` of a progress event (one update per whole percent)."""
        percent = int(100 * int(event["step"]) / max(int(event["total"]), 1))
        if percent == self.percent:
            return
        self.percent = percent
        if self.artifact is None:
            # Called from a flow's (sync) thread, where Prefect's sync_compatible returns the id, not a coroutine.
            self.artifact = cast(
                uuid.UUID,
                create_progress_artifact(percent, key=self.key, description=f"{event['stage']} training progress"),
            )
        else:
            update_progress_artifact(self.artifact, percent)


class _Events:
    """The events file one stage command appends to (tasks/events.py), read as it grows."""

    def __init__(self, log: StageLog, progress: _Progress | None):
        EVENTS_DIR.mkdir(parents=True, exist_ok=True)
        self.path = EVENTS_DIR / f"{uuid.uuid4().hex}.jsonl"
        self.offset, self.log, self.progress = 0, log, progress

    def poll(self) -> None:
        """Handle the events written since the last poll."""
        new, self.offset = events.read(self.path, self.offset)
        for event in new:
            kind = event["event"]
            if kind == events.START:
                self.log.ran = True
            elif kind == events.EXIT and self.log.stage_code not in (EXIT_BAD_INPUT, EXIT_VERDICT):
                # A verdict stands: another process's later exit (the lead's, cut off by it) does not undo it.
                self.log.stage_code = int(event["code"])
            elif kind in (events.HEALTH, events.STOPPED):
                self.log.diagnosis.append(events.describe(event))
            elif kind == events.PROGRESS and self.progress:
                self.progress.update(event)
            elif kind == events.PREFLIGHT:
                create_markdown_artifact(
                    event["report"],
                    key=f"{event['stage'].replace('_', '-')}-preflight",
                    description=f"{event['stage']} preflight: {event['verdict']}",
                )

    def close(self) -> None:
        """Read what is left and remove the file."""
        self.poll()
        self.path.unlink(missing_ok=True)


def _stream(
    cmd: list[str], env: dict[str, str], progress: _Progress | None = None, log_file: Path | None = None
) -> StageLog:
    """Run ``cmd``, streaming its output into the Prefect log (less DVC's advice and the engines'
    chatter, :class:`EngineNoise`) and all of it into ``log_file``, its events into ``StageLog``."""
    logger = get_run_logger()
    log = StageLog()
    advice, noise, hidden = DvcAdvice(), EngineNoise(), 0
    stage_events = _Events(log, progress)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    full = open(log_file, "w") if log_file is not None else contextlib.nullcontext()  # noqa: SIM115
    proc = subprocess.Popen(
        cmd,
        env={
            **os.environ,
            **env,
            "PATH": _path_with_this_python(),
            events.EVENTS_ENV: str(stage_events.path.resolve()),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with full as fh:
            for line in proc.stdout:  # type: ignore[union-attr]
                line = redact_text(line.rstrip())  # MLflow prints its server's URI, credentials and all ("View run at")
                advised = bool(line) and advice.hides(line)  # once in the README, not after every stage
                if fh is not None and not advised:
                    fh.write(engine_config_line(line) + "\n")
                if not line or advised:
                    continue
                if noise.hides(line):
                    hidden += 1
                    continue
                logger.info(line)
                log.tail = (log.tail + [line])[-40:]
                stage_events.poll()
    except BaseException:  # Ctrl-C, or Prefect cancelling the run: the stage must not outlive the flow
        _stop_stage(proc, logger.info)
        raise
    finally:
        log.code = proc.wait()
        stage_events.close()
    if hidden and log_file is not None:
        logger.info(f"({hidden} lines of engine logs in {log_file})")
    return log


def _stop_stage(proc: subprocess.Popen, log: Callable[[str], None], grace_s: float = STAGE_GRACE_S) -> None:
    """Wait for an interrupted stage command to stop, logging what it says. A Ctrl-C in a terminal
    reached it already (it is in the flow's process group); when only the flow was signalled, it
    gets SIGINT (a clean stop), then SIGTERM, then SIGKILL, ``grace_s`` apart."""

    def drain() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.strip():
                log(redact_text(line.rstrip()))

    # In this run's context: a thread without it would log through a Prefect client of its own.
    reader = threading.Thread(target=contextvars.copy_context().run, args=(drain,), name="stage-output", daemon=True)
    reader.start()
    stop_tree(proc, grace_s, (None, signal.SIGINT, signal.SIGTERM, signal.SIGKILL))
    reader.join(timeout=grace_s)


def _stage_exit(log: StageLog) -> int:
    """The stage command's own exit code, from its exit event (DVC exits 1 whatever it was)."""
    return log.stage_code if log.stage_code not in (None, 0) else log.code


DVC_FAILED = "ERROR: failed to reproduce"  # DVC's line after a failed command: says only that it failed


def verdict_message(name: str, log: StageLog, reports: Sequence[Path] = ()) -> str:
    """One line for a failure a retry would repeat: the stage's own last word (its gate's verdict or
    its input error, already in the log above with the report) and the path of the full report."""
    said = [line for line in log.tail if not line.startswith(DVC_FAILED)]
    last = said[-1] if said else "no output"
    paths = [str(p) for p in reports if str(p) not in last]
    where = f" (full report: {', '.join(paths)})" if paths else ""
    return f"stage {name!r} failed with exit code {_stage_exit(log)}: {last}{where}"


def _fail(name: str, log: StageLog, reports: str = "", final: bool = True, report_paths: Sequence[Path] = ()) -> None:
    """Raise :class:`StageFailed` (:class:`StageVerdict` when a retry would repeat it); on the
    last attempt, first publish what went wrong.

    A verdict's message is one line (:func:`verdict_message`): the stage printed its report once
    already, and Prefect repeats a failed task's message in the task's and the flow's final state.
    An unexpected failure keeps the log tail, for its traceback."""
    if _stage_exit(log) == EXIT_INTERRUPTED:
        raise StageInterrupted(f"stage {name!r} was interrupted (exit {EXIT_INTERRUPTED})")
    verdict = _stage_exit(log) in (EXIT_BAD_INPUT, EXIT_VERDICT)
    final = final or verdict
    log_tail = "\n".join(log.tail)
    if final:
        diagnosis = "\n".join(f"- {line}" for line in log.diagnosis) or "No health symptoms were reported."
        attempt = task_run.get_run_count() or 1
        create_markdown_artifact(
            f"## Stage `{name}` failed (exit {_stage_exit(log)}, attempt {attempt})\n\n"
            f"### Health diagnosis\n\n{diagnosis}\n\n"
            f"{reports}\n\n### Log tail\n\n```\n{log_tail}\n```",
            key=f"failed-{name.replace('_', '-')}",
            description=f"grpoflow stage {name} failed",
        )
    if verdict:
        raise StageVerdict(verdict_message(name, log, report_paths))
    # The tail keeps the traceback; the last line says what failed, whatever the stage printed after its error.
    raise StageFailed(
        f"stage {name!r} failed with exit code {_stage_exit(log)}:\n{log_tail}\n{failure_line(name, log)}"
    )


# A Python exception's last line ("ValueError: ...", a rank's "[rank0]: AssertionError: ..."), as a traceback ends.
_EXCEPTION_LINE = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failed)\b"
)


def failure_line(name: str, log: StageLog) -> str:
    """One line for an unexpected failure: the stage, its exit code, the exception's last line (the last
    line of the tail that reads like one: MLflow's monitor and DVC speak after it) and the full log."""
    said = [line for line in log.tail if not line.startswith(DVC_FAILED)]
    error = next((line for line in reversed(said) if _EXCEPTION_LINE.match(line)), said[-1] if said else "no output")
    return f"stage {name!r} failed (exit {_stage_exit(log)}): {error.strip()} (full log: {STAGE_LOGS / f'{name}.log'})"


def verdict_state(exc: Exception) -> State:
    """The flow run's final state for an expected failure (a gate's verdict, bad input): Failed with
    the one-line message, returned by the flow rather than raised, so that Prefect logs no
    traceback for it."""
    return Failed(message=str(exc), data=exc)


def expected_failures_as_state(body: Callable[P, R]) -> Callable[P, R | State]:
    """A flow's body whose expected failures end the run Failed (:func:`verdict_state`), returned rather
    than raised, with no traceback of the flow's: a stage's verdict (a gate, bad input a stage found; its
    report is in the log already), and bad input to the flow itself (a :class:`ConfigError`: its params
    file, overrides or arms, as a deployment's parameters give them), printed once. Raised, a ConfigError
    reached the serve console as three tracebacks of twenty lines. A caller of the flow still gets the
    exception raised (Prefect raises a Failed state's data)."""

    @functools.wraps(body)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | State:
        try:
            return body(*args, **kwargs)
        except StageVerdict as exc:
            return verdict_state(exc)
        except ConfigError as exc:
            print(f"error: {exc}")
            return verdict_state(exc)

    return run


@task(name="dvc-stage", task_run_name="{stage.name}", retry_condition_fn=_worth_retrying)
def run_dvc_stage(
    stage: Stage, env: dict[str, str], gpu_limit: str | None = None, retries: int = 0
) -> StageResult | State:
    """``dvc repro --single-item`` one stage, streaming its output into the Prefect log; a GPU
    stage first takes a slot of the ``gpu_limit`` global concurrency limit. A stage DVC skipped
    ends in the state named ``Cached`` (a kind of Completed), so that the UI tells it apart."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "dvc", "repro", "--single-item", stage.name]
    slot = concurrency(gpu_limit, occupy=1) if gpu_limit else contextlib.nullcontext()
    deps = lineage.stage_deps(stage.name)
    with slot:
        read = lineage.record(stage.name, deps)
        log = _stream(cmd, env, progress=_Progress(stage.name), log_file=STAGE_LOGS / f"{stage.name}.log")
    if log.code == 0:
        lineage.check_stage(stage.name, read, deps)
    if log.code != 0:
        final = (task_run.get_run_count() or 1) > retries
        reports = _stage_reports(stage)
        _fail(stage.name, log, "\n\n".join(p.read_text() for p in reports), final=final, report_paths=reports)
    _publish_reports(stage)
    result = StageResult(stage.name, log.ran, round(time.perf_counter() - start, 2), _read_metrics(stage))
    if not log.ran:
        return Completed(name="Cached", message="skipped by DVC: inputs unchanged, outputs from its cache", data=result)
    return result
