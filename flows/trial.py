"""One tuning trial's process as the tuning flow runs it: ``tasks.tune_trial`` with its output in a
log file, its history CSV followed as the stage writes it (atomically, a row per step), each val
accuracy handed to a judge (the Optuna trial's report and its pruner's verdict), and the process
stopped when the judge says the trial trails: SIGINT first (the stage ends cleanly, its MLflow run
closed), then firmer signals."""

from __future__ import annotations

import csv
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flows.process_tree import stop_tree
from grpoflow import metric_names as M

POLL_S = 1.0  # how often the history is read while a trial trains
GRACE_S = 20.0  # for a stopped trial to end by itself, before each firmer signal

Judge = Callable[[int, float], bool]  # (steps trained, val accuracy) -> stop the trial now


@dataclass(frozen=True)
class Ran:
    """How a trial's process ended: its exit code, the steps it trained (rows of its history) and,
    when the judge stopped it, the step it was stopped at."""

    code: int
    steps: int
    pruned_at: int | None


def history_rows(history: Path) -> list[dict]:
    """The rows of a history CSV as it stands (none before the first is written)."""
    try:
        with open(history, newline="") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        return []


def val_points(rows: list[dict]) -> list[tuple[int, float]]:
    """(steps trained, val accuracy) of each history row that has a val accuracy."""
    return [(int(r[M.STEP]) + 1, float(r[M.VAL_ACCURACY])) for r in rows if r.get(M.VAL_ACCURACY, "") != ""]


def stop(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """End ``proc`` and the processes below it: SIGINT, then SIGTERM, then SIGKILL, ``grace_s`` apart."""
    stop_tree(proc, grace_s)


def follow(proc: subprocess.Popen, history: Path, judge: Judge, poll_s: float = POLL_S) -> int | None:
    """Wait for ``proc`` to end, handing each new val point of ``history`` to ``judge``; stop the
    process when the judge says so while it still trains. The step it was stopped at, or None when
    it ended by itself (its last points are judged too, but nothing is left to stop)."""
    judged = 0
    while True:
        running = proc.poll() is None
        points = val_points(history_rows(history))
        for step, value in points[judged:]:
            judged += 1
            if judge(step, value) and running:
                stop(proc)
                return step
        if not running:
            return None
        time.sleep(poll_s)


def run(cmd: list[str], env: dict[str, str], history: Path, log: Path, judge: Judge, poll_s: float = POLL_S) -> Ran:
    """Run a trial's command with its output in ``log``, following ``history`` (:func:`follow`); an
    interrupted flow stops the trial before it goes on."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            pruned_at = follow(proc, history, judge, poll_s)
        except BaseException:
            stop(proc)
            raise
        code = proc.wait()
    return Ran(code, len(history_rows(history)), pruned_at)


def log_tail(log: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a trial's log."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no output)"
