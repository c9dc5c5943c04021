"""Inputs as a stage read them: what dvc.lock and a DVC experiment may claim a stage was run on.

DVC writes a stage's lock entry after its command ends, hashing the inputs then, and ``dvc exp save``
hashes the workspace again when the run ends. A file dropped into ``data/raw/`` while the run goes would
be recorded as an input of a prepare that never read it. So each stage's inputs are fingerprinted as it
starts (every file under each dependency of its dvc.yaml entry: size and modification time, which any
write changes) and compared when it ends and before the experiment is saved:

- changed while the stage ran: its lock entry cannot be trusted; it is removed (so the next run repeats
  the stage) and the stage fails with one line naming the file;
- changed after the stage, before the save: the experiment is not saved, with one line naming the file.

The fingerprints live in ``.grpoflow/lineage/<stage>.json`` (git ignores .grpoflow/).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from flows.stage_errors import StageVerdict
from grpoflow.io import TOOL_DIRS, atomic_write, written_by_tools

RECORDS = Path(".grpoflow/lineage")
Fingerprint = dict[str, list[int]]  # file -> [size, mtime_ns]


class InputsChanged(StageVerdict):
    """A stage's input changed after the stage read it; the message is one line naming the file."""


def stage_deps(stage: str, dvc_yaml: str | Path = "dvc.yaml") -> list[str]:
    """The dependencies of ``stage`` as dvc.yaml lists them (what DVC hashes into its lock entry)."""
    entry = (yaml.safe_load(Path(dvc_yaml).read_text()).get("stages") or {}).get(stage) or {}
    return [next(iter(d)) if isinstance(d, dict) else str(d) for d in entry.get("deps") or []]


def fingerprint(paths: list[str]) -> Fingerprint:
    """Every file under ``paths`` (a file, or a directory walked whole) with its size and mtime; the
    files tools write beside the code left out (:func:`grpoflow.io.written_by_tools`: a stage's first
    import writes bytecode into the code it depends on, and DVC hashes none of them either)."""
    found: Fingerprint = {}
    for path in paths:
        if os.path.isfile(path):
            found[path] = _stat(path)
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in TOOL_DIRS]
            for name in files:
                file = os.path.join(folder, name)
                if not written_by_tools(os.path.relpath(file, path)):
                    found[file] = _stat(file)
    return found


def _stat(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError:  # removed while walked: the comparison sees it gone
        return [-1, -1]
    return [st.st_size, st.st_mtime_ns]


def differences(before: Fingerprint, after: Fingerprint) -> list[str]:
    """One phrase per file that appeared, went or changed, in path order."""
    said = []
    for path in sorted(before.keys() | after.keys()):
        if path not in before:
            said.append(f"{path} appeared")
        elif path not in after:
            said.append(f"{path} was removed")
        elif before[path] != after[path]:
            said.append(f"{path} changed")
    return said


def record(stage: str, deps: list[str]) -> Fingerprint:
    """Fingerprint ``stage``'s inputs as it starts, and keep them for the save's check."""
    found = fingerprint(deps)
    with atomic_write(RECORDS / f"{stage}.json") as fh:
        fh.write(json.dumps({"deps": deps, "files": found}))
    return found


def check_stage(stage: str, before: Fingerprint, deps: list[str], lock: str | Path = "dvc.lock") -> None:
    """After the stage: :class:`InputsChanged` (its lock entry removed) when an input changed while it ran."""
    changed = differences(before, fingerprint(deps))
    if changed:
        forget(stage, lock)
        raise InputsChanged(
            f"{_first(changed)} while stage {stage!r} ran, so dvc.lock would record inputs it never read: its lock "
            "entry is removed and the next run repeats it"
        )


def check_before_save(stages: list[str]) -> None:
    """Before the experiment is saved: :class:`InputsChanged` when an input of any of ``stages`` changed since
    that stage read it (the save would hash the new content into the experiment)."""
    for stage in stages:
        path = RECORDS / f"{stage}.json"
        if not path.is_file():
            continue
        kept = json.loads(path.read_text())
        changed = differences(kept["files"], fingerprint(kept["deps"]))
        if changed:
            raise InputsChanged(
                f"{_first(changed)} after stage {stage!r} read its inputs: the run is not saved as a DVC "
                "experiment, which would claim inputs no stage read (undo the change, or run again)"
            )


def locked_stages(lock: str | Path = "dvc.lock") -> dict[str, dict]:
    """Each stage's entry in the lock file, by name (none without the file)."""
    path = Path(lock)
    return ((yaml.safe_load(path.read_text()) or {}).get("stages") or {}) if path.is_file() else {}


def forget(stage: str, lock: str | Path = "dvc.lock") -> None:
    """Remove ``stage``'s entry from the lock file, so that DVC runs it again."""
    path = Path(lock)
    if not path.is_file():
        return
    spec = yaml.safe_load(path.read_text()) or {}
    if stage in (spec.get("stages") or {}):
        del spec["stages"][stage]
        with atomic_write(path) as fh:
            fh.write(yaml.safe_dump(spec, sort_keys=False))


def _first(changed: list[str]) -> str:
    more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
    return changed[0] + more
