"""A failed stage loses nothing: the outputs of its last successful run that DVC deletes before
running it and does not cache (metrics, reports) are put back, and what the failed attempt wrote
there is set aside under ``.grpoflow/failed/<stage>/``."""

from __future__ import annotations

import contextlib
import filecmp
import shutil
from collections.abc import Iterator
from pathlib import Path

from flows import experiments, workspace
from tasks.stages import DVC_YAML, Stage

LAST_GOOD = workspace.STATE_DIR / "last-good"
FAILED = workspace.STATE_DIR / "failed"


def _uncached_outputs(stage: Stage) -> list[Path]:
    """The stage's outputs that DVC deletes before running it but does not cache (metrics, plots,
    reports), as they are now."""
    uncached = set(experiments.untracked_outputs(DVC_YAML))
    return [Path(p) for p in stage.outs if p in uncached]  # outs holds the metrics too


def _move(src: Path, dst: Path) -> None:
    if dst.is_dir():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(src), str(dst))


def _same(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and filecmp.cmp(a, b, shallow=False)


def _put_back(paths: list[Path], backup: Path, failed: Path) -> tuple[list[str], list[str]]:
    """Restore ``paths`` from ``backup``; what is there now goes to ``failed``. (restored, set aside)"""
    restored, aside = [], []
    for path in paths:
        if _same(path, backup / path):
            continue
        if path.exists():
            _move(path, failed / path)
            aside.append(str(path))
        _move(backup / path, path)
        restored.append(str(path))
    return restored, aside


@contextlib.contextmanager
def kept_outputs(stage: Stage) -> Iterator[None]:
    """If ``stage`` fails, put back the outputs of its last successful run that DVC deleted and does
    not cache (``metrics/*.json``: nothing else holds them); what the failed attempt wrote there
    instead (e.g. a gate's verdict) is kept under ``.grpoflow/failed/<stage>/``."""
    paths = [p for p in _uncached_outputs(stage) if p.exists()]
    backup = LAST_GOOD / stage.name
    shutil.rmtree(backup, ignore_errors=True)
    for path in paths:
        (backup / path).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, backup / path)
    try:
        yield
    except BaseException:
        restored, aside = _put_back(paths, backup, FAILED / stage.name)
        if restored:
            print(
                f"{stage.name} did not finish: put back {', '.join(restored)} of its last successful run"
                + (f" (this attempt's {', '.join(aside)}: under {FAILED / stage.name})" if aside else "")
            )
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)
