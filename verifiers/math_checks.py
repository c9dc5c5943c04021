"""math-verify in killable checker processes, within a time and a memory budget, from any thread.

Every check runs in a persistent child process (a small pool of them, shared by the caller's
threads), never in the caller: SymPy and mpmath compute big numbers in C, where no signal can
interrupt them, so one answer (``10^{10^{10^{10}}}``) used to hold the caller for 30 s and 8.5 GB.

- Time: the child gives each check :data:`CHECK_BUDGET_S` from an interval timer in its main thread
  (math-verify's own ``signal.alarm`` works only in the main thread) and answers 0 when it runs
  out; a child that has not answered :data:`CHECKER_GRACE_S` after the budget is stuck in C and is
  killed. The verdict is 0 either way and the next check gets a fresh child.
- Memory: each child has an address-space limit (``RLIMIT_AS``, :data:`CHECKER_MEMORY_BYTES`), so an
  allocation past it fails in the child, never in the caller; a check whose ``MemoryError``
  reaches the loop scores 0 and its child is replaced (SymPy swallows some: then the budget ends it).
- Processes: children die with their parent (``PR_SET_PDEATHSIG`` on Linux, set for a long-lived
  spawner thread, as the signal follows the thread that started the child), see end-of-file on
  their stdin when it exits otherwise, and are ended at exit; a forked copy of the caller (a
  multiprocessing pool) starts its own pool and closes its copies of the parent's pipes.

The common case pays a pipe round trip (0.1-0.3 ms of CPU; a batch writes up to 16 requests at
once), no process start: a child is started once and kept until it fails. A replacement starts on
the next check (1-3 s: it imports SymPy), outside any answer's budget.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import select
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from verifiers.math_checker import CHECK_BUDGET_S, CHECKER_MEMORY_BYTES

CHECKER_GRACE_S = 1.0  # beyond the budget, before a checker process counts as stuck and is killed
_WORKER_START_S = 120.0  # a checker process imports SymPy: slow on a loaded machine
_T = TypeVar("_T")
_log = logging.getLogger("verifiers.math")


class VerifierUnavailable(RuntimeError):
    """The math checker cannot run at all (its helper process did not start): not a wrong answer."""


# --- the caller's side: a pool of checker processes ----------------------------------------------


class Checked(NamedTuple):
    """A check's outcome: ``ok`` is the verdict; ``reason`` is empty for a real verdict, else why
    the answer counts as not verified (``budget``, ``memory``, ``error``, ``killed: ...``)."""

    ok: bool
    reason: str = ""


class _CheckerDied(Exception):
    """A checker process ended or stopped answering in the middle of a check; ``done`` holds the
    verdicts it gave before that one."""

    def __init__(self, message: str, done: list[Checked]):
        super().__init__(message)
        self.done = done


Request = tuple[str, Sequence[str]]  # (op, args): ("equal", (gold, guess)) or ("parses", (latex,))
_PIPELINE_REQUESTS = 16  # requests written to a child at once: one wake-up per chunk, not per check
_PIPELINE_BYTES = 32 << 10  # ... and at most this many bytes, well inside a pipe's 64 KiB buffer


def _chunks(lines: Sequence[bytes], start: int) -> list[bytes]:
    """The request lines from ``start`` that go to a child in one write."""
    chunk: list[bytes] = []
    size = 0
    for line in lines[start : start + _PIPELINE_REQUESTS]:
        if chunk and size + len(line) > _PIPELINE_BYTES:
            break
        chunk.append(line)
        size += len(line)
    return chunk


def _ready(pipe: Any, event: int, timeout: float) -> bool:
    """Whether ``pipe`` can be read (``POLLIN``) or written (``POLLOUT``), or has closed, within
    ``timeout`` seconds. ``poll``: ``select.select`` fails on descriptors above 1023 (a busy trainer)."""
    poller = select.poll()
    poller.register(pipe, event | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(timeout * 1000))


class _Checker:
    """One child process running :func:`serve_checks`."""

    def __init__(self, spawn: Callable[[Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]] | None = None):
        """Start the child (its ``Popen`` through ``spawn``, on the pool's spawner thread) and wait
        here until it is ready: several children import SymPy at once."""
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        code = f"from verifiers.math_checker import serve_checks; serve_checks({os.getpid()}, {CHECKER_MEMORY_BYTES})"
        command = [sys.executable, "-c", code]
        env = {**os.environ, "PYTHONPATH": path}

        def popen() -> subprocess.Popen[bytes]:
            return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env)

        try:
            self.proc = spawn(popen) if spawn is not None else popen()
        except OSError as exc:
            raise VerifierUnavailable(f"cannot start the math checker process {command}: {exc}") from exc
        assert self.proc.stdin is not None
        os.set_blocking(self.proc.stdin.fileno(), False)  # a write never waits past its deadline
        if self._read_line(_WORKER_START_S) != b"ready":
            self.kill()
            raise VerifierUnavailable(
                f"the math checker process {command} did not start within {_WORKER_START_S:.0f} s; see its stderr above"
            )

    def _read_line(self, timeout: float) -> bytes | None:
        """One reply line, None after ``timeout`` seconds or at end-of-file. The pipe is unbuffered
        (a line is read byte by byte), so replies still in the pipe stay visible to the next wait."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline() if _ready(self.proc.stdout, select.POLLIN, timeout) else b""
        return line.strip() if line.endswith(b"\n") else None

    def _write(self, payload: bytes, timeout: float) -> None:
        """Write all of ``payload``; :class:`_CheckerDied` when the child stops reading for ``timeout``
        seconds (stuck on an earlier request while the pipe is full) or has ended."""
        assert self.proc.stdin is not None
        view = memoryview(payload)
        try:
            while view:
                written = self.proc.stdin.write(view)
                if written is None and not _ready(self.proc.stdin, select.POLLOUT, timeout):
                    raise _CheckerDied(f"it read no request for {timeout:.1f} s", [])
                view = view[written or 0 :]
        except (OSError, ValueError) as exc:
            raise _CheckerDied(f"it had ended ({exc})", []) from exc

    def check_many(self, lines: Sequence[bytes], budget_s: float) -> list[Checked]:
        """The child's verdicts on request ``lines``, written at once and answered in order. Stops
        after a ``memory`` verdict (the child then ends); :class:`_CheckerDied`, with the verdicts so
        far, when the child dies, breaks the protocol or outlives the budget on one request."""
        deadline = budget_s + CHECKER_GRACE_S
        self._write(b"".join(lines), deadline)
        done: list[Checked] = []
        for _ in lines:
            answer = self._read_line(deadline)
            if answer is None:
                why = f"no answer within {deadline:.1f} s" if self.proc.poll() is None else "it died"
                raise _CheckerDied(why, done)
            verdict, _, reason = answer.decode(errors="replace").partition(" ")
            if verdict not in ("0", "1"):
                raise _CheckerDied(f"it broke the protocol: {answer[:80]!r}", done)
            done.append(Checked(verdict == "1", reason))
            if reason == "memory":
                break
        return done

    def close(self) -> None:
        """End the child: EOF first, a kill if it does not go."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        """End the child now (it hung, broke the protocol or ran out of memory)."""
        self.proc.kill()
        self.proc.wait()

    def forget(self) -> None:
        """In a forked copy of the parent: close this copy's ends of the pipes, leave the child alone."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    os.close(pipe.fileno())
            except (OSError, ValueError):
                pass
        self.proc.returncode = 0  # not ours to wait for


class _Spawner:
    """A daemon thread that starts every checker process and lives as long as the caller:
    ``PR_SET_PDEATHSIG`` fires when the *thread* that started a child ends, so children started
    from a short-lived worker thread would die with it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="math-checker-spawner", daemon=True).start()

    def _serve(self) -> None:
        while True:
            fn, future = self._jobs.get()
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which re-raises it
                future.set_exception(exc)

    def call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` run on the spawner thread."""
        future: Future[_T] = Future()
        self._jobs.put((fn, future))
        return future.result()


class _CheckerPool:
    """Up to ``size`` checker processes, started on first use, shared by all threads; a child that
    fails a check is replaced (counted in ``restarts``)."""

    def __init__(self, size: int):
        self.size = size
        self.restarts = 0
        self._pid = os.getpid()
        self._idle: list[_Checker] = []
        self._busy: set[_Checker] = set()
        self._lock = threading.Lock()
        self._free = threading.Condition(self._lock)
        self._in_use = 0
        self._spawner: _Spawner | None = None

    def grow(self, size: int) -> None:
        """Allow up to ``size`` concurrent checks (never fewer than now)."""
        with self._free:
            if size > self.size:
                self.size = size
                self._free.notify_all()

    def _take(self) -> _Checker | None:
        with self._free:
            while self._in_use >= self.size:
                self._free.wait()
            self._in_use += 1
            return self._idle.pop() if self._idle else None

    def _give_back(self, checker: _Checker | None) -> None:
        with self._free:
            self._in_use -= 1
            if checker is not None:
                self._busy.discard(checker)
                self._idle.append(checker)
            self._free.notify()

    def _start(self) -> _Checker:
        with self._lock:
            spawner = self._spawner = self._spawner or _Spawner()
        checker = _Checker(spawner.call)
        with self._lock:
            self._busy.add(checker)
        return checker

    def _replace(self, checker: _Checker, why: str, args: Sequence[str]) -> None:
        _log.warning(
            "math checker process %s on %r; replaced, answer counts as not verified", why, [a[:80] for a in args]
        )
        checker.kill()
        with self._lock:
            self._busy.discard(checker)
            self.restarts += 1

    def run_many(self, requests: Sequence[Request], budget_s: float) -> list[Checked]:
        """Verdicts in order, from one child at a time, a chunk of requests per write; a child that
        dies, hangs or runs out of memory is replaced and its check counts as failed."""
        lines = [json.dumps([op, budget_s, *args]).encode() + b"\n" for op, args in requests]
        results: list[Checked] = []
        while len(results) < len(lines):
            results += self._run_chunk(_chunks(lines, len(results)), requests[len(results) :], budget_s)
        return results

    def _run_chunk(self, lines: list[bytes], requests: Sequence[Request], budget_s: float) -> list[Checked]:
        """Verdicts on a non-empty prefix of ``lines`` (the encoded ``requests``)."""
        checker = self._take()
        try:
            if checker is not None and checker.proc.poll() is not None:  # died while idle: not this check's fault
                self._replace(checker, "had died while idle", ())
                checker = None
            checker = checker or self._start()
            try:
                done = checker.check_many(lines, budget_s)
            except _CheckerDied as exc:
                self._replace(checker, f"failed ({exc})", requests[len(exc.done)][1])
                checker = None
                return [*exc.done, Checked(False, f"killed: {exc}")]
            if done[-1].reason == "memory":
                self._replace(checker, f"ran out of its {CHECKER_MEMORY_BYTES >> 20} MiB", requests[len(done) - 1][1])
                checker = None
            return done
        finally:
            self._give_back(checker)

    def close(self) -> None:
        """End every child (at exit): idle ones by end-of-file, busy ones by a kill."""
        if os.getpid() != self._pid:
            return  # a forked copy: the children belong to the parent
        with self._lock:
            idle, self._idle = self._idle, []
            busy, self._busy = list(self._busy), set()
        for checker in idle:
            checker.close()
        for checker in busy:
            checker.kill()

    def forget(self) -> None:
        """In a forked copy: drop the parent's children without touching them."""
        for checker in [*self._idle, *self._busy]:
            checker.forget()
        self._idle, self._busy = [], set()


_POOL: _CheckerPool | None = None
_POOL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked copy starts a pool of its own; its copies of the parent's pipes are closed so that
    the parent's children still see end-of-file when the parent goes."""
    global _POOL, _POOL_LOCK
    pool, _POOL, _POOL_LOCK = _POOL, None, threading.Lock()
    if pool is not None and pool._pid != os.getpid():
        pool.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pool(size: int = 0) -> _CheckerPool:
    """The process-wide checker pool (a fresh one after a fork), allowing at least ``size`` checks at once."""
    global _POOL, _POOL_LOCK
    if _POOL is not None and _POOL._pid != os.getpid():
        _POOL, _POOL_LOCK = None, threading.Lock()
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = _CheckerPool(min(4, os.cpu_count() or 1))
            atexit.register(_POOL.close)
        pool = _POOL
    pool.grow(size)
    return pool


def check_many(requests: Sequence[Request], workers: int = 1) -> list[Checked]:
    """math-verify checks, each within :data:`CHECK_BUDGET_S`, in order: over up to ``workers``
    checker processes at once (a thread of this process waits on each), from any thread."""
    pool = _pool(workers)
    if workers <= 1 or len(requests) < 2:
        return pool.run_many(requests, CHECK_BUDGET_S)
    shares = [requests[k::workers] for k in range(workers)]
    results: list[Checked] = [Checked(False)] * len(requests)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="math-check") as threads:
        for k, found in enumerate(threads.map(lambda share: pool.run_many(share, CHECK_BUDGET_S), shares)):
            results[k::workers] = found
    return results


def check_verdict(op: str, *args: str) -> Checked:
    """A math-verify check (``equal`` gold, guess; ``parses`` latex) in a checker process, from any
    thread: its verdict, and why it is none when the budget, the memory limit or the child failed."""
    return check_many([(op, args)])[0]


def check(op: str, *args: str) -> bool:
    """The verdict of :func:`check_verdict`."""
    return check_verdict(op, *args).ok
