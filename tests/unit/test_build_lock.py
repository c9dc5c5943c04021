"""A compiled-op build lock a killed run left behind is removed; a live one is waited on, and said so
(grpoflow/models/build_lock.py; #51: a run once waited 10.5 minutes on a stale lock without a word)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from grpoflow.models.build_lock import check_build_locks, holders


def _lock(cache, op: str = "deepspeed_shm_comm"):
    path = cache / op / "lock"
    path.parent.mkdir(parents=True)
    os.close(os.open(path, os.O_CREAT | os.O_EXCL))  # as torch's FileBaton makes it
    return path


def test_a_lock_no_process_holds_is_removed_and_said_so(tmp_path):
    lock = _lock(tmp_path)
    (line,) = check_build_locks(tmp_path)
    assert not lock.exists() and "stale build lock" in line and str(lock) in line
    assert check_build_locks(tmp_path) == []  # nothing left to say


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
        (line,) = check_build_locks(tmp_path)
        assert lock.exists() and f"waiting for process {builder.pid}" in line and "deepspeed_shm_comm" in line
    finally:
        builder.kill()
        builder.wait()
    deadline = time.monotonic() + 10
    while holders(lock) and time.monotonic() < deadline:  # the kernel closes a dead process's files
        time.sleep(0.05)
    assert "stale build lock" in check_build_locks(tmp_path)[0] and not lock.exists()
