"""Structured events from a stage to the flow that runs it: one JSON object per line, appended to
the file that ``GRPOFLOW_EVENTS`` names (a stage run by hand, or by ``dvc repro`` alone, has none
and emits nothing). The flow reads them instead of parsing console text.

Kinds: ``progress`` (step, total), ``health`` (a symptom's fields), ``stopped`` (reason,
message), ``exit`` (code). Each carries ``stage``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

EVENTS_ENV = "GRPOFLOW_EVENTS"
PROGRESS, HEALTH, STOPPED, EXIT = "progress", "health", "stopped", "exit"


def emit(kind: str, stage: str, **fields: Any) -> None:
    """Append one event, if a reader asked for them; one write per line, so processes never interleave."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
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
