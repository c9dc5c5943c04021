"""One flow run at a time per workspace, and the run's own edits to tracked files undone after it.

DVC holds a repository-wide lock while any command runs, so two flow runs in one checkout (a
scheduled one and a hand-triggered one, say) would fail each other at random. The second waits
here instead, on an OS file lock that dies with its holder: a run killed with SIGKILL never
leaves a stale lock behind.

A run with another parameter set or with overrides writes them into the files DVC reads (as
``dvc exp run --set-param`` does), so that DVC caches and records exactly what ran; the original
text is journaled first and put back when the run ends. A run killed in between leaves the
journal, and the next run in the workspace restores from it before doing anything else.

The journal (``.grpoflow/restore.json``) is written atomically and read as untrusted:

- only ``dvc.yaml`` and params files (``.yaml``/``.yml``) inside the workspace, outside hidden
  folders (``.git``, ``.dvc``, ...), are ever edited or restored; other entries are refused by name;
- a journal that cannot be read is moved aside to ``restore.json.corrupt-<time>`` with a warning
  naming the files that may need ``git checkout``, so it never blocks later runs;
- a file whose text is neither the original nor what the run wrote was edited by hand during the
  run. The original is still put back (the run's overrides must not outlive it, and the user's
  text contains them), and the user's text is kept beside it as ``<file>.edited-during-run``
  with a warning. Refusing to start while the files are dirty was the alternative; it would stop
  the common case of running with uncommitted params edits, which the journal handles exactly.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from grpoflow.io import atomic_write
from grpoflow.provenance import RUN_EDITS_JOURNAL

STATE_DIR = Path(".grpoflow")
LOCK_FILE = STATE_DIR / "run.lock"
JOURNAL = RUN_EDITS_JOURNAL  # .grpoflow/restore.json: git_commit reads it too (a run's rewrites are not edits)
JOURNAL_VERSION = 2
EDITED_SUFFIX = ".edited-during-run"
_EDITABLE_SUFFIXES = (".yaml", ".yml")

Log = Callable[[str], None]


class CorruptJournal(ValueError):
    """The restore journal cannot be read or does not have the expected shape."""


@contextmanager
def exclusive(holder: str, log: Log = print, poll_s: float = 2.0) -> Iterator[None]:
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
                    holder_now = fh.read().strip() or "?"
                    log(f"workspace {Path.cwd()} is busy with flow run {holder_now}: waiting for it to finish")
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


def editable_problem(path: str | Path) -> str | None:
    """Why a run may not edit (or restore) ``path``, or None: only dvc.yaml and params files inside the workspace."""
    root = Path.cwd().resolve()
    try:
        full = (root / path).resolve()
    except (OSError, RuntimeError, ValueError):
        return "cannot be resolved"
    if not full.is_relative_to(root):
        return f"is outside the workspace {root}"
    rel = full.relative_to(root)
    if any(part.startswith(".") for part in rel.parts):
        return "is in a hidden folder (.git, .dvc, .grpoflow, ...)"
    if rel.name != "dvc.yaml" and rel.suffix not in _EDITABLE_SUFFIXES:
        return "is neither dvc.yaml nor a params file (.yaml, .yml)"
    return None


def _relative(path: str | Path) -> str:
    """``path`` as the journal names it: relative to the workspace, with '/'."""
    return (Path.cwd().resolve() / path).resolve().relative_to(Path.cwd().resolve()).as_posix()


def _read(path: Path) -> str | None:
    """The file's text, None when it does not exist. Bytes that are not UTF-8 survive the round
    trip (surrogateescape), so a file damaged during a run is compared and kept, not a crash."""
    return path.read_bytes().decode("utf-8", "surrogateescape") if path.is_file() else None


def _write(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        with atomic_write(path, "wb") as fh:
            fh.write(text.encode("utf-8", "surrogateescape"))


def _write_journal(entries: dict[str, dict[str, str | None]]) -> None:
    """Atomically, and durably: the rename itself is flushed to disk before any file is edited."""
    with atomic_write(JOURNAL) as fh:
        json.dump({"version": JOURNAL_VERSION, "files": entries}, fh)
    fd = os.open(JOURNAL.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse_journal(raw: bytes) -> dict[str, dict[str, str | None]]:
    """``path -> {"original": text|None, "written": text|None}`` (no "written" in a version-1 journal)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise CorruptJournal("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CorruptJournal(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise CorruptJournal(f"unreadable ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise CorruptJournal(f"expected a JSON object, found a {type(data).__name__}")
    if "version" not in data:  # version 1: {path: original text or null}
        entries = {path: {"original": text} for path, text in data.items()}
    elif data["version"] == JOURNAL_VERSION and isinstance(data.get("files"), dict):
        entries = data["files"]
    else:
        raise CorruptJournal(f"unknown version {data['version']!r} or no 'files' object")
    for path, entry in entries.items():
        texts_ok = isinstance(entry, dict) and all(t is None or isinstance(t, str) for t in entry.values())
        if not texts_ok or "original" not in entry:
            raise CorruptJournal(f"entry {path!r}: expected {{'original': text or null, 'written': text or null}}")
    return entries


def _named_in(raw: bytes) -> list[str]:
    """The editable paths a damaged journal still names (best effort), for the warning."""
    keys = re.findall(r'"((?:[^"\\]|\\.)+)"\s*:', raw.decode("utf-8", errors="replace"))
    return sorted({k for k in keys if editable_problem(k) is None})


def _set_aside(path: Path, kind: str) -> Path:
    """A fresh name beside ``path`` for ``kind`` (``.corrupt-<time>``, ``.edited-during-run``)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(path.name + kind.replace("<time>", stamp))
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}{kind.replace('<time>', stamp)}.{n}")
        n += 1
    return candidate


def _undo(path: str, original: str | None, written: str | None, known_written: bool, log: Log) -> bool:
    """Put ``original`` back in ``path``; keep a hand edit made since the run wrote it aside.
    True when the file had to be changed."""
    target = Path(path)
    current = _read(target)
    if current == original:
        return False
    if known_written and current != written:
        if current is None:
            log(f"WARNING: {path} was deleted during the run; its text from before the run is restored")
        else:
            aside = _set_aside(target, EDITED_SUFFIX)
            shutil.copyfile(target, aside)
            log(
                f"WARNING: {path} was edited by hand during the run. The run's edits are undone, which restores the "
                f"text from before the run; your edited version (which also contains the run's edits) is kept in "
                f"{aside}: copy what you need back from it."
            )
    _write(target, original)
    return True


def _quarantine(raw: bytes, what: str, log: Log) -> None:
    """Move a journal that cannot be (fully) used aside, saying what is wrong and what to check by hand."""
    aside = _set_aside(JOURNAL, ".corrupt-<time>")
    os.replace(JOURNAL, aside)
    named = _named_in(raw)
    files = ", ".join(named) if named else "dvc.yaml and the params file of the interrupted run"
    log(
        f"WARNING: {JOURNAL}, the record of an interrupted run's edits, {what}; moved it to {aside}. "
        f"Check {files} with `git status`/`git diff`, and `git checkout -- <file>` whatever the run left edited."
    )


def restore_interrupted(log: Log = print) -> list[str]:
    """Put back files an interrupted run had edited; the paths restored. A damaged journal is
    moved aside with a warning instead of blocking every later run."""
    if not JOURNAL.is_file():
        return []
    raw = JOURNAL.read_bytes()
    try:
        entries = _parse_journal(raw)
    except CorruptJournal as exc:
        _quarantine(raw, f"cannot be used: {exc}", log)
        return []
    refused = {p: problem for p in entries if (problem := editable_problem(p))}
    restored = []
    for path, entry in entries.items():
        if path not in refused and _undo(path, entry["original"], entry.get("written"), "written" in entry, log):
            restored.append(path)
    if refused:
        detail = "; ".join(f"{p!r} {problem}" for p, problem in sorted(refused.items()))
        _quarantine(raw, f"names files a run never edits, left untouched: {detail}", log)
    else:
        JOURNAL.unlink()
    if restored:
        log(f"restored {', '.join(sorted(restored))}, left edited by an interrupted run")
    return sorted(restored)


def original_if_edited(path: str | Path) -> str | None:
    """The text ``path`` had before the edits of the run now holding the workspace, where that run
    edited it (the journal's record); None while no run's edits are in it. Read without the lock:
    the journal is written before the edits and removed after the restore. :class:`CorruptJournal`
    when the journal cannot be read."""
    try:
        raw = JOURNAL.read_bytes()
    except FileNotFoundError:
        return None
    entry = _parse_journal(raw).get(_relative(path))
    if entry is None or entry["original"] is None or entry["original"] == _read(Path(path)):
        return None
    return entry["original"]


@contextmanager
def edits(changes: dict[str, str], log: Log = print) -> Iterator[None]:
    """Write ``changes`` (path -> new text) for the duration of the block; journal and restore
    the original text (or absence) of each, keeping any hand edit made meanwhile aside. Only
    dvc.yaml and params files inside the workspace. Hold :func:`exclusive` around it."""
    for path in changes:
        if problem := editable_problem(path):
            raise ValueError(f"a run may only edit dvc.yaml and params files: {path} {problem}")
    wanted = {_relative(p): text for p, text in changes.items()}
    originals = {p: _read(Path(p)) for p in wanted}
    changed = {p: t for p, t in wanted.items() if originals[p] != t}
    if changed:
        _write_journal({p: {"original": originals[p], "written": t} for p, t in changed.items()})
        for path, text in changed.items():
            _write(Path(path), text)
    try:
        yield
    finally:
        if changed:
            for path, text in changed.items():
                _undo(path, originals[path], text, True, log)
            JOURNAL.unlink(missing_ok=True)
