"""The fingerprint folders of a checkpoint directory, reorganised by rank 0 alone.

Only one set of inputs is active at the top level; the others are parked under
``other_fingerprints/<fp>/`` by renames, brought back when their inputs run again, and the least
recently parked sets are deleted past ``keep_fingerprints`` (see :mod:`grpoflow.models.checkpoint`).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from grpoflow.io import atomic_write
from grpoflow.models.checkpoint_layout import (
    LATEST,
    MANIFEST,
    OTHER,
    fingerprint_of,
    latest_step,
    saved_steps,
    step_parts,
    step_tag,
)

# The logger of grpoflow.models.checkpoint, whose warnings these are (operators filter on its name).
_log = logging.getLogger("grpoflow.models.checkpoint")


def _move_step(src: Path, dst: Path, step: int) -> None:
    """Rename every part of checkpoint ``step`` from ``src`` into ``dst`` (same layout)."""
    for part in step_parts(src, step):
        target = dst / part.relative_to(src)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, target)


def remove_step(directory: Path, step: int) -> None:
    """Delete checkpoint ``step``, its manifest first so that it stops counting at once."""
    (directory / step_tag(step) / MANIFEST).unlink(missing_ok=True)
    for part in step_parts(directory, step):
        shutil.rmtree(part, ignore_errors=True)


def _steps_text(steps: Iterable[int]) -> str:
    return ", ".join(str(s) for s in sorted(steps))


def _park_others(directory: Path, fingerprint: str) -> None:
    """Move the top-level checkpoints of other inputs to ``other_fingerprints/<their fp>/``."""
    parked: dict[str, list[int]] = {}
    for step in saved_steps(directory):
        made_from = fingerprint_of(directory, step)
        if made_from is not None and made_from != fingerprint:
            _move_step(directory, directory / OTHER / made_from, step)
            parked.setdefault(made_from, []).append(step)
    for made_from, steps in parked.items():
        home = directory / OTHER / made_from
        os.utime(home, ns=(time.time_ns(), time.time_ns()))  # the eviction order: least recently parked first
        _log.warning(
            "%s: checkpoints of other inputs (fingerprint %s, steps %s) moved to %s; a run with those "
            "inputs resumes them again",
            directory,
            made_from,
            _steps_text(steps),
            home,
        )


def _unpark(directory: Path, fingerprint: str) -> None:
    """Bring this fingerprint's parked checkpoints back to the top level."""
    home = directory / OTHER / fingerprint
    if not home.is_dir():
        return
    steps = saved_steps(home)
    for step in steps:
        if (directory / step_tag(step)).is_dir():
            if fingerprint_of(directory, step) == fingerprint:
                remove_step(home, step)  # the same inputs and step twice: keep the one in place
                continue
            remove_step(directory, step)  # debris of an unknown save in the way
        _move_step(home, directory, step)
    shutil.rmtree(home)
    if steps:
        _log.warning(
            "%s: resuming the checkpoints of these inputs (steps %s) kept in %s", directory, _steps_text(steps), home
        )


def _evict(directory: Path, keep_fingerprints: int) -> None:
    """Delete the parked sets beyond the ``keep_fingerprints`` most recently parked."""
    root = directory / OTHER
    if not root.is_dir():
        return
    homes = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for home in homes[max(keep_fingerprints, 0) :]:
        _log.warning(
            "%s: deleted the checkpoints of fingerprint %s (steps %s): the checkpoints of at most %d "
            "other sets of inputs are kept",
            directory,
            home.name,
            _steps_text(saved_steps(home)),
            keep_fingerprints,
        )
        shutil.rmtree(home)
    if not any(root.iterdir()):
        root.rmdir()


def refresh_latest(directory: Path, fingerprint: str) -> None:
    """Point ``latest`` at the newest checkpoint of these inputs that has a manifest; remove it when none."""
    marker = directory / LATEST
    ours = [
        s
        for s in saved_steps(directory)
        if (directory / step_tag(s) / MANIFEST).is_file() and fingerprint_of(directory, s) == fingerprint
    ]
    if not ours:
        marker.unlink(missing_ok=True)
    elif latest_step(directory) != ours[0]:
        with atomic_write(marker) as fh:
            fh.write(step_tag(ours[0]))


def activate(directory: Path, fingerprint: str, keep_fingerprints: int) -> None:
    """Make ``fingerprint`` the top-level set: park the others, unpark its own, bound the parked sets."""
    if not directory.is_dir():
        return
    _park_others(directory, fingerprint)
    _unpark(directory, fingerprint)
    _evict(directory, keep_fingerprints)
    refresh_latest(directory, fingerprint)


def prune(directory: Path, fingerprint: str, keep: int, saved: int) -> None:
    """Keep the ``keep`` newest checkpoints of these inputs up to ``saved``. Newer ones of the same
    inputs belong to a run this one resumed past (they failed their checks); saves of unknown inputs
    older than ``saved`` are interrupted ones. Checkpoints of other inputs are left alone."""
    ours = [s for s in saved_steps(directory) if fingerprint_of(directory, s) == fingerprint]
    doomed = [s for s in ours if s > saved] + [s for s in ours if s <= saved][max(keep, 1) :]
    unknown = [s for s in saved_steps(directory) if s < saved and fingerprint_of(directory, s) is None]
    if unknown:
        _log.warning("%s: deleted incomplete checkpoints of unknown inputs (steps %s)", directory, _steps_text(unknown))
    for step in doomed + unknown:
        remove_step(directory, step)
