"""One flow run at a time per workspace, and the run's own edits to tracked files undone after it.

DVC holds a repository-wide lock while any command runs, so two flow runs in one checkout (a
scheduled one and a hand-triggered one, say) would fail each other at random. The second waits
here instead, on an OS file lock that dies with its holder: a run killed with SIGKILL never
leaves a stale lock behind.

A run with another parameter set or with overrides writes them into the files DVC reads (as
``dvc exp run --set-param`` does), so that DVC caches and records exactly what ran; the original
text is journaled first and put back when the run ends. A run killed in between leaves the
journal, and the next run in the workspace restores from it before doing anything else.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from grpoflow.io import atomic_write

STATE_DIR = Path(".grpoflow")
LOCK_FILE = STATE_DIR / "run.lock"
JOURNAL = STATE_DIR / "restore.json"


@contextmanager
def exclusive(holder: str, log: Callable[[str], None] = print, poll_s: float = 2.0) -> Iterator[None]:
    """Hold this workspace for ``holder`` (e.g. the flow run's name), waiting while another run has it."""
    STATE_DIR.mkdir(exist_ok=True)
    with open(LOCK_FILE, "a+") as fh:
        announced = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not announced:
                    fh.seek(0)
                    log(f"workspace {Path.cwd()} is busy with flow run {fh.read().strip() or '?'}: waiting for it to finish")
                    announced = True
                time.sleep(poll_s)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{holder} (pid {os.getpid()})")
        fh.flush()
        try:
            restore_interrupted(log)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def restore_interrupted(log: Callable[[str], None] = print) -> list[str]:
    """Put back files an interrupted run had edited; the paths restored."""
    if not JOURNAL.is_file():
        return []
    saved = json.loads(JOURNAL.read_text())
    for path, text in saved.items():
        _write(Path(path), text)
    JOURNAL.unlink()
    if saved:
        log(f"restored {', '.join(sorted(saved))}, left edited by an interrupted run")
    return sorted(saved)


def _write(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        with atomic_write(path) as fh:
            fh.write(text)


@contextmanager
def edits(changes: dict[str, str]) -> Iterator[None]:
    """Write ``changes`` (path -> new text) for the duration of the block; journal and restore
    the original text (or absence) of each. Hold :func:`exclusive` around it."""
    originals = {p: (Path(p).read_text() if Path(p).is_file() else None) for p, text in changes.items()}
    changed = {p: t for p, t in changes.items() if originals[p] != t}
    if changed:
        with atomic_write(JOURNAL) as fh:
            json.dump({p: originals[p] for p in changed}, fh)
        for path, text in changed.items():
            _write(Path(path), text)
    try:
        yield
    finally:
        if changed:
            for path in changed:
                _write(Path(path), originals[path])
            JOURNAL.unlink(missing_ok=True)
