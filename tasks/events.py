"""Structured events from a stage to the flow that runs it: one JSON object per line, appended to
the file that ``GRPOFLOW_EVENTS`` names (a stage run by hand, or by ``dvc repro`` alone, has none
and emits nothing). The flow reads them instead of parsing console text.

Kinds: ``start`` (the stage's command began: DVC did not skip it), ``progress`` (step, total),
``health`` (a symptom's fields), ``stopped`` (reason, message), ``preflight`` (verdict, report),
``exit`` (code). Each carries
``stage``. Only the lead process (rank 0) of a multi-process stage emits, but for what one process
alone knows: its own verdict (a stop, an exit code 2 or 3), which the lead may never report (torchrun
stops it when that process exits), is emitted ``every_rank``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EVENTS_ENV = "GRPOFLOW_EVENTS"
START, PROGRESS, HEALTH, STOPPED, EXIT, PREFLIGHT = "start", "progress", "health", "stopped", "exit", "preflight"


def emit(kind: str, stage: str, *, every_rank: bool = False, **fields: Any) -> None:
    """Append one event, if a reader asked for them (from the lead process alone, unless
    ``every_rank``); one write per line, so processes never interleave."""
    path = os.environ.get(EVENTS_ENV)
    if not path or (os.environ.get("RANK", "0") != "0" and not every_rank):
        return
    line = json.dumps({"event": kind, "stage": stage, **fields}, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str | Path, offset: int = 0) -> tuple[list[dict], int]:
    """The complete events after byte ``offset`` of ``path``, and the offset after the last one."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    complete = data[: data.rfind(b"\n") + 1]
    events = [json.loads(line) for line in complete.decode().splitlines() if line.strip()]
    return events, offset + len(complete)


def describe(event: dict) -> str:
    """One console line for a health or stop event (the diagnosis a failure report lists)."""
    if event["event"] == STOPPED:
        return f"{event['stage']}: STOPPED ({event.get('reason')}): {event.get('message')}"
    return f"{event['stage']}: HEALTH step {event.get('step', '?')}: {event.get('name')}: {event.get('evidence')}" + (
        f" -> {event['remedy']}" if event.get("remedy") else ""
    )
