"""A compiled-op build lock a killed run left behind is removed; a live one is waited on, and said so
(grpoflow/models/build_lock.py; #51: a run once waited 10.5 minutes on a stale lock without a word)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from grpoflow.models import build_lock
from grpoflow.models.build_lock import check_build_locks, holders, on_network_filesystem


def _lock(cache, op: str = "deepspeed_shm_comm"):
    path = cache / op / "lock"
    path.parent.mkdir(parents=True)
    os.close(os.open(path, os.O_CREAT | os.O_EXCL))  # as torch's FileBaton makes it
    return path


def said(cache, **kwargs) -> list[str]:
    lines: list[str] = []
    check_build_locks(cache, say=lines.append, **kwargs)
    return lines


def test_a_lock_no_process_holds_is_removed_and_said_so(tmp_path):
    lock = _lock(tmp_path)
    (line,) = said(tmp_path, network=False)
    assert not lock.exists() and "stale build lock" in line and str(lock) in line
    assert said(tmp_path, network=False) == []  # nothing left to say


def test_a_lock_a_builder_holds_is_kept_and_its_holder_named(tmp_path):
    lock = _lock(tmp_path)
    # Another process holds the lock open, as a build in progress does (FileBaton keeps its descriptor).
    builder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time; fd = os.open({str(lock)!r}, os.O_RDONLY); print(1, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert builder.stdout.readline().strip() == "1"
        assert holders(lock) == [builder.pid]
        (line,) = said(tmp_path, network=False)
        assert lock.exists() and f"waiting for process {builder.pid}" in line and "deepspeed_shm_comm" in line
    finally:
        builder.kill()
        builder.wait()
    deadline = time.monotonic() + 10
    while holders(lock) and time.monotonic() < deadline:  # the kernel closes a dead process's files
        time.sleep(0.05)
    assert "stale build lock" in said(tmp_path, network=False)[0] and not lock.exists()


def test_on_a_shared_filesystem_a_young_lock_is_waited_for_until_no_build_can_hold_it(tmp_path, monkeypatch):
    """A build on another machine sharing the cache holds the lock where no process here can see it:
    the lock is removed only once older than any build, with a line saying what is waited for."""
    monkeypatch.setattr(build_lock, "NETWORK_LOCK_AGE_S", 0.4)
    lock = _lock(tmp_path)
    start = time.monotonic()
    waiting, removed = said(tmp_path, network=True, settle_s=0.0, poll_s=0.05)
    assert time.monotonic() - start >= 0.3 and not lock.exists()
    assert "shared filesystem" in waiting and str(lock) in waiting and "stale build lock" in removed


def test_on_a_shared_filesystem_an_old_lock_goes_at_once(tmp_path):
    lock = _lock(tmp_path)
    old = time.time() - build_lock.NETWORK_LOCK_AGE_S - 5
    os.utime(lock, (old, old))
    (line,) = said(tmp_path, network=True, settle_s=0.0)
    assert "stale build lock" in line and not lock.exists()


def test_the_filesystem_of_a_path_is_its_longest_mount_point(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "overlay / overlay rw 0 0\n"
        "server:/export /shared nfs4 rw 0 0\n"
        "tmpfs /shared/scratch tmpfs rw 0 0\n"
        "sshfs#me@host: /remote fuse.sshfs rw 0 0\n"
    )
    assert on_network_filesystem(Path("/shared/grpoflow/.cache"), mounts)
    assert not on_network_filesystem(Path("/shared/scratch/x"), mounts)
    assert not on_network_filesystem(Path("/sharedother"), mounts)
    assert on_network_filesystem(Path("/remote/cache"), mounts)
    assert not on_network_filesystem(Path("/work"), tmp_path / "absent")
