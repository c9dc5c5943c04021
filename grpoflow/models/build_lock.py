"""The lock of a compiled-op build (torch.utils.cpp_extension's ``<TORCH_EXTENSIONS_DIR>/<op>/lock``),
which DeepSpeed takes while it compiles its CPU communication op.

The lock is a file created with O_EXCL and removed when the build ends; a build that is killed
(Ctrl-C at the wrong second, a timeout, an OOM kill) leaves it behind, and every later run then
waits on it forever without a word. The builder holds the file open for as long as it builds, so a
lock that no process holds open is stale: it is removed, and a live one is named with its holder
before the wait. On a network filesystem (a cache on a volume that several pods mount), the builder
may be a process on another machine, which this one cannot see: there a lock no process here holds
is removed only once it is older than any build (:data:`NETWORK_LOCK_AGE_S`), and waited for until then.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
# A build of DeepSpeed's CPU op takes one to two minutes on 2 cores; a lock older than this, on a
# filesystem other machines share, is left from a build that ended without removing it.
NETWORK_LOCK_AGE_S = 600.0
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "9p")


def on_network_filesystem(path: Path, mounts: Path = PROC / "self" / "mounts") -> bool:
    """Whether ``path`` lies on a filesystem other machines may share (the longest mount point above it)."""
    target, best, kind = os.path.realpath(path), "", ""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and (target == fields[1] or target.startswith(fields[1].rstrip("/") + "/")):
            if len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    return kind in NETWORK_FILESYSTEMS or kind.startswith("fuse.")


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


def check_build_locks(
    cache: Path,
    say: Callable[[str], None] = print,
    proc: Path = PROC,
    settle_s: float = 0.5,
    network: bool | None = None,
    poll_s: float = 5.0,
) -> None:
    """Remove each stale build lock under ``cache``, and ``say`` what was removed and what is still
    being waited for (and why). A lock is stale when no process holds it and it is still there
    ``settle_s`` later: a build that ends closes the file, then removes it microseconds after, and
    a lock taken from under it would fail its removal. On a network filesystem (``network``:
    detected when None), a lock no process here holds is waited for, polled every ``poll_s``,
    until it goes or is :data:`NETWORK_LOCK_AGE_S` old."""
    network = on_network_filesystem(cache) if network is None else network
    for lock in sorted(cache.glob("*/lock")):
        held_by = _holders_after(lock, proc, settle_s)
        if held_by is None:  # a build that was just ending
            continue
        if held_by:
            say(
                f"waiting for process {', '.join(map(str, held_by))}, which is building {lock.parent.name} "
                f"(it holds {lock}); this run uses the op once that build ends"
            )
            continue
        if network and not _wait_until_old(lock, say, poll_s):
            continue
        try:
            lock.unlink()
        except FileNotFoundError:  # the build ended meanwhile
            continue
        say(f"removed a stale build lock, {lock}: no process holds it (a run was stopped mid-build)")


def _holders_after(lock: Path, proc: Path, settle_s: float) -> list[int] | None:
    """The other processes holding ``lock``, looked at again ``settle_s`` later if none; None once it is gone."""
    held_by = [pid for pid in holders(lock, proc) if pid != os.getpid()]
    if not held_by:
        time.sleep(settle_s)
        if not lock.exists():
            return None
        held_by = [pid for pid in holders(lock, proc) if pid != os.getpid()]
    return held_by


def _wait_until_old(lock: Path, say: Callable[[str], None], poll_s: float) -> bool:
    """Wait while ``lock`` is younger than any build (another machine's may hold it); whether it is
    still there, now old enough to be stale."""
    age = _age_s(lock)
    if age is not None and age < NETWORK_LOCK_AGE_S:
        say(
            f"waiting for {lock}: no process on this machine holds it, and it lies on a shared filesystem, where "
            f"a build on another machine may hold it; it is taken as stale at {NETWORK_LOCK_AGE_S:.0f} s old "
            f"(it is {age:.0f} s old)"
        )
    while age is not None and age < NETWORK_LOCK_AGE_S:
        time.sleep(min(poll_s, NETWORK_LOCK_AGE_S - age))
        age = _age_s(lock)
    return age is not None


def _age_s(path: Path) -> float | None:
    """Seconds since ``path`` was last changed, or None when it is gone."""
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
