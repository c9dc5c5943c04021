"""The lock of a compiled-op build (torch.utils.cpp_extension's ``<TORCH_EXTENSIONS_DIR>/<op>/lock``),
which DeepSpeed takes while it compiles its CPU communication op.

The lock is a file created with O_EXCL and removed when the build ends; a build that is killed
(Ctrl-C at the wrong second, a timeout, an OOM kill) leaves it behind, and every later run then
waits on it forever without a word. The builder holds the file open for as long as it builds, so a
lock that no process holds open is stale: it is removed, and a live one is named with its holder
before the wait.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC = Path("/proc")


def holders(lock: Path, proc: Path = PROC) -> list[int]:
    """The processes that have ``lock`` open (those whose descriptors this user may read)."""
    target = os.path.realpath(lock)
    found = []
    for fds in proc.glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == target for fd in fds.iterdir()):
                found.append(int(fds.parent.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return sorted(found)


def check_build_locks(cache: Path, proc: Path = PROC, settle_s: float = 0.5) -> list[str]:
    """Remove each stale build lock under ``cache``; the lines that say what was removed and what
    is still being waited for (and why), for the console. A lock is stale when no process holds it
    and it is still there ``settle_s`` later: a build that ends closes the file, then removes it
    microseconds after, and a lock taken from under it would fail its removal."""
    lines = []
    for lock in sorted(cache.glob("*/lock")):
        held_by = [pid for pid in holders(lock, proc) if pid != os.getpid()]
        if not held_by:
            time.sleep(settle_s)
            if not lock.exists():  # a build that was just ending
                continue
            held_by = [pid for pid in holders(lock, proc) if pid != os.getpid()]
        if held_by:
            lines.append(
                f"waiting for process {', '.join(map(str, held_by))}, which is building {lock.parent.name} "
                f"(it holds {lock}); this run uses the op once that build ends"
            )
            continue
        try:
            lock.unlink()
        except FileNotFoundError:  # the build ended meanwhile
            continue
        lines.append(f"removed a stale build lock, {lock}: no process holds it (a run was stopped mid-build)")
    return lines
