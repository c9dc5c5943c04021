"""Stopping a command and everything it started: DVC's command, torchrun's agents and workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import psutil


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` and every process below it (DVC ignores SIGINT while its command runs)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)


def stop_tree(proc: subprocess.Popen, grace_s: float, signals=(signal.SIGINT, signal.SIGTERM, signal.SIGKILL)) -> None:
    """Wait ``grace_s`` for ``proc`` to end after each of ``signals`` in turn, sent to it and every
    process below it (None: wait without one); SIGINT first, a clean stop, then firmer ones. What was
    below it when this began and outlives it (its end hands such children to init, out of its tree)
    is stopped after it."""
    below = descendants(proc.pid)
    for sig in signals:
        if sig is not None:
            signal_tree(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    stop_procs(below, grace_s)


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` now; none where it is gone. Kept before a parent is stopped, it still
    names the children the parent's end hands to init."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def stop_procs(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM each of ``procs`` still running, then SIGKILL those left after ``grace_s``; wait for each."""
    alive = procs
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)
        _, alive = psutil.wait_procs(alive, timeout=grace_s)
        if not alive:
            break


def reap_children(grace_s: float) -> list[int]:
    """Stop every process this one started, directly or below (an interrupted run's: its temporary
    Prefect server, anything a stage left), and wait for each to be gone: SIGTERM, then SIGKILL after
    ``grace_s``. The command's prompt then comes back with nothing of the run still running. The pids
    that were still there."""
    children = descendants(os.getpid())
    stop_procs(children, grace_s)
    return [p.pid for p in children]
