"""A sandbox for untrusted Python (model completions executed by the code reward).

Each check runs in fresh network, mount, IPC and PID namespaces, created per check by a fork server
(:mod:`verifiers.sandbox_runtime`, a bare ``python -I -S`` started once per process):
- **no network**: the new network namespace has only a loopback interface, and it is down;
- **no writes outside its directory**: private tmpfs mounts cover every world-writable directory
  (/tmp, /var/tmp, /dev/shm, /run/lock, /dev/mqueue), and the code runs as ``nobody`` with
  no_new_privs; the working directory is the fresh /tmp. SysV IPC objects live in the check's own IPC
  namespace;
- **no view of the host**: /proc is remounted in the new PID namespace;
- **limits**: rlimits on address space, CPU seconds, processes, file size and open files; a wall-clock
  timeout kills the namespace's PID 1, and the kernel then kills every process left inside before the
  call returns (nothing survives by ``setsid`` or double-forking); captured output is capped, and the
  code's stdout is closed beyond the cap. The code's processes sit in a user namespace of their own
  (uids 0 and nobody mapped to themselves), so RLIMIT_NPROC counts that check's processes only, even
  with checks running side by side (where the kernel refuses user namespaces, all of nobody's processes
  share the count: :func:`user_namespaces_available`);
- **a verdict the completion cannot forge**: the tests run in a separate judge process that talks to the
  completion's process only in plain data (see the runtime module's docstring for the protocol).

What crosses the boundary: None, bool, int, float (inf/nan too), complex, str, bytes, range and
list/tuple/dict/set/frozenset of those, as exact builtin types, nesting and size capped; an iterator
result arrives as a list iterator of its items. The tests compare these genuine builtin values with
Python's own operators (so ``1 == 1.0`` holds, as in the test author's Python, but a tuple is never a
list and an ``__eq__`` of the completion's never runs). A call whose argument or result is anything else
(an instance of a completion's class, a lambda) fails its test, and so does a test that needs such an
object. In-place changes to arguments, and what the completion prints, are not seen by the tests (tests
that capture stdout fail). The tests share one scope, as before, and the files of the check's /tmp.
Completion names that shadow a builtin are not visible to the tests, which always use the real builtins;
a module the completion imported is visible to the tests (as the judge's own import) only when it is on
``sandbox_runtime.JUDGE_MODULES``.

Checks run side by side (:func:`run_batch`) share the machine's cores and memory: one that burns CPU for
its whole wall limit slows its neighbours, so keep ``workers`` at or below the cores and the wall limit
generous.

Where namespaces cannot be created, :func:`run_tests` refuses to run unless ``allow_unsandboxed`` is set,
which keeps only the rlimits, the separate judge and the timeout (processes that leave the process group
may survive it, and the host's /proc, network and world-writable directories are reachable).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from verifiers.sandbox_runtime import NOBODY  # noqa: F401 - part of this module's API (tests look for its processes)

log = logging.getLogger(__name__)

RUNTIME = Path(__file__).with_name("sandbox_runtime.py")
GRACE_SECONDS = 10.0  # beyond the wall limit, before the caller gives up on a supervisor that never answers
_PROBE = ("import decimal, fractions, statistics\ndef f():\n    return 1", ["import heapq, bisect\nassert f() == 1"])


class Limits(BaseModel):
    """Every setting of the sandbox: the limits of one check, the batch's parallelism, the fallback policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_seconds: float = Field(5.0, gt=0, description="Wall-clock limit for one completion's code and tests.")
    cpu_seconds: int = Field(5, ge=1, description="CPU-time rlimit of each sandboxed process.")
    memory_mb: int = Field(512, ge=64, description="Address-space rlimit of each sandboxed process.")
    max_processes: int = Field(32, ge=1, description="Processes the code may run at once (stops fork bombs).")
    max_file_mb: int = Field(16, ge=1, description="Largest file a sandboxed process may write.")
    max_open_files: int = Field(64, ge=16, description="Open-file rlimit of each sandboxed process.")
    tmpfs_mb: int = Field(64, ge=1, description="Size of each private tmpfs (/tmp, /var/tmp, /dev/shm, ...).")
    max_output_kb: int = Field(1024, ge=1, description="Output read from the code; beyond it its stdout is closed.")
    workers: int = Field(2, ge=1, description="Checks run in parallel by the batch API.")
    allow_unsandboxed: bool = Field(
        False, description="Run code without namespaces where they cannot be created (disposable machines only)."
    )


@dataclass
class Result:
    """The outcome of one check: a verdict per test, and what went wrong if anything did."""

    passed: list[bool]
    timed_out: bool = False
    exit_code: int | None = None  # the judge's: 0 when it finished, -9 when killed at the wall limit
    sandboxed: bool = True
    stderr_tail: str = ""  # the end of the code's stdout and stderr together
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds per phase

    @property
    def fraction(self) -> float:
        """Share of tests passed."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


class SandboxUnavailable(RuntimeError):
    """The machine cannot create the sandbox, and running unsandboxed was not allowed."""


@lru_cache(maxsize=1)
def isolation_available() -> bool:
    """Whether this process may create the namespaces and mounts (as root, or with CAP_SYS_ADMIN)."""
    return sys.platform == "linux" and _probe("probe")


@lru_cache(maxsize=1)
def user_namespaces_available() -> bool:
    """Whether each check's code can get a user namespace of its own (RLIMIT_NPROC counted per check)."""
    return isolation_available() and _probe("probe-userns")


def _probe(what: str) -> bool:
    probe = subprocess.run(
        [sys.executable, "-I", "-S", str(RUNTIME), what], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


class _Server:
    """The fork server: one process for all checks of this process, each check a fresh fork of it."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.process = subprocess.Popen(
                [python, "-I", "-S", str(RUNTIME), "serve", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env={"PATH": "/usr/bin:/bin"},
                cwd="/",
                start_new_session=True,
            )
        self.control.settimeout(30)
        try:
            ready = self.control.recv(16)
        except OSError:
            ready = b""
        self.control.settimeout(None)
        if ready != b"ready":
            self.close()
            raise SandboxUnavailable(f"the sandbox server did not start with {python}")

    def submit(self, conn: socket.socket) -> None:
        """Hand one check's socket to the server, which forks a supervisor for it."""
        with self.lock:
            socket.send_fds(self.control, [b"c"], [conn.fileno()])

    def alive(self) -> bool:
        """Whether it still runs and belongs to this process (a forked child needs its own)."""
        return self.owner == os.getpid() and self.process.poll() is None

    def close(self) -> None:
        """Stop it; its supervisors die with it (parent-death signal), and their sandboxes with them."""
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_server: _Server | None = None
_server_lock = threading.Lock()


def _get_server(restart: bool = False) -> _Server:
    global _server
    with _server_lock:
        if _server is not None and (restart or not _server.alive()):
            if _server.owner == os.getpid():
                _server.close()
            _server = None
        if _server is None:
            _server = _start_server()
        return _server


def _start_server() -> _Server:
    """A server on the first interpreter whose standard library ``nobody`` can import (probed by a real check).

    The real interpreter (not a venv shim: -S gives it the standard library and nothing else), unless it
    lives somewhere private such as root's home: then the system's python3.
    """
    own = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    candidates = [own] + [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    isolate = isolation_available()
    for python in dict.fromkeys(os.path.realpath(c) for c in candidates):
        try:
            server = _Server(python)
        except SandboxUnavailable as exc:
            log.info("sandbox: %s", exc)
            continue
        probe = _Pending(server, Limits(), isolate).finish(*_PROBE)
        if probe.passed == [True]:
            return server
        log.info("sandbox: %s cannot run the probe as nobody: %s", python, probe.notes)
        server.close()
    raise SandboxUnavailable(f"no interpreter among {candidates} can import the standard library as nobody")


def sandbox_python() -> str:
    """The interpreter the sandbox runs (started and probed on first use)."""
    return _get_server().python


@atexit.register
def _shutdown() -> None:
    if _server is not None and _server.owner == os.getpid():
        _server.close()


def _isolation(limits: Limits, allow_unsandboxed: bool | None) -> bool:
    """True when namespaces are used; raises unless they are available or running without them is allowed."""
    if isolation_available():
        return True
    if allow_unsandboxed if allow_unsandboxed is not None else limits.allow_unsandboxed:
        return False
    raise SandboxUnavailable(
        "cannot create network/mount/IPC/PID namespaces here (needs root or CAP_SYS_ADMIN); refusing to run "
        "untrusted code. Set the sandbox's allow_unsandboxed only on a disposable machine."
    )


def _validate(code: object, tests: object, where: str) -> None:
    if not isinstance(code, str):
        raise ValueError(f"{where}: field 'code' must be a str, got {type(code).__name__}")
    if not isinstance(tests, (list, tuple)) or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"{where}: field 'tests' must be a list of str")


def run_tests(
    code: str, tests: Sequence[str], limits: Limits = Limits(), *, allow_unsandboxed: bool | None = None
) -> Result:
    """Run ``code`` then each test in ``tests`` separately; one bool per test.

    Tests that finished before a timeout or crash keep their verdict; the rest count as failed.
    ``allow_unsandboxed``, when given, overrides ``limits.allow_unsandboxed``.
    """
    _validate(code, tests, "run_tests")
    return _prepare(limits, _isolation(limits, allow_unsandboxed)).finish(code, list(tests))


def run_batch(
    items: Sequence[tuple[str, Sequence[str]]],
    limits: Limits = Limits(),
    *,
    workers: int | None = None,
    allow_unsandboxed: bool | None = None,
) -> list[Result]:
    """:func:`run_tests` for each ``(code, tests)``, ``workers`` (default ``limits.workers``) checks at a time.

    Each check has its own namespaces, tmpfs, processes and limits, exactly as when run alone; each worker
    sets up its next sandbox while the current one runs (the setup never sees a payload before its own).
    """
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"row {i}: expected a (code, tests) pair, got {type(item).__name__}")
        _validate(item[0], item[1], f"row {i}")
    isolate = _isolation(limits, allow_unsandboxed)
    results: list[Result | None] = [None] * len(items)
    indices = iter(range(len(items)))
    lock = threading.Lock()

    def next_index() -> int | None:
        with lock:
            return next(indices, None)

    def work() -> None:
        pending: _Pending | None = _prepare(limits, isolate)
        try:
            while (i := next_index()) is not None:
                current, pending = pending, None
                try:
                    pending = _prepare(limits, isolate)  # set up the next sandbox while this one runs
                finally:
                    assert current is not None
                    results[i] = current.finish(items[i][0], list(items[i][1]))
        finally:
            if pending is not None:
                pending.discard()

    workers = max(1, min(workers or limits.workers, len(items)))
    if not items:
        return []
    if workers == 1:
        work()
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()
    return [r for r in results if r is not None]  # every index was filled


class _ServerGone(RuntimeError):
    """The fork server did not take the request (it died); a fresh one is started once."""


def _prepare(limits: Limits, isolate: bool) -> _Pending:
    try:
        return _Pending(_get_server(), limits, isolate)
    except _ServerGone:
        return _Pending(_get_server(restart=True), limits, isolate)


class _Pending:
    """A sandbox being set up (namespaces, judge, candidate) that waits for its payload."""

    def __init__(self, server: _Server, limits: Limits, isolate: bool) -> None:
        self.limits = limits
        self.isolate = isolate
        self.created = time.monotonic()
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with theirs:
                server.submit(theirs)
        except OSError as exc:
            self.sock.close()
            raise _ServerGone(str(exc)) from exc
        self.sock.settimeout(30)
        try:
            _send_frame(
                self.sock,
                {**limits.model_dump(), "isolate": isolate, "userns": isolate and user_namespaces_available()},
            )
        except OSError:
            pass  # the supervisor is gone already: finish() reads the closed socket and reports it

    def finish(self, code: str, tests: list[str]) -> Result:
        """Send the payload and wait for the verdicts (at most the wall limit plus a grace period)."""
        sent = time.monotonic()
        with self.sock:
            try:
                self.sock.settimeout(self.limits.wall_seconds + GRACE_SECONDS)
                try:
                    _send_frame(self.sock, {"code": code, "tests": tests})
                except BrokenPipeError:
                    pass  # the supervisor gave up before reading (a set-up error): its reply says why
                reply = _recv_frame(self.sock)
            except (OSError, EOFError, ValueError) as exc:
                log.warning("sandbox: no answer from the supervisor (%s: %s)", type(exc).__name__, exc)
                return Result(
                    [False] * len(tests),
                    timed_out=isinstance(exc, TimeoutError),
                    sandboxed=self.isolate,
                    notes=[f"sandbox error: no answer from the supervisor ({type(exc).__name__})"],
                )
        return _result(reply, len(tests), self.isolate, (self.created, sent, time.monotonic()))

    def discard(self) -> None:
        """Give the sandbox up unused: its supervisor sees the closed socket and kills it."""
        self.sock.close()


def _send_frame(sock: socket.socket, obj: object) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(len(data).to_bytes(4, "big") + data)


def _recv_frame(sock: socket.socket) -> dict:
    size = int.from_bytes(_recv_exact(sock, 4), "big")
    return json.loads(_recv_exact(sock, size))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the supervisor closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _result(reply: dict, n_tests: int, isolate: bool, stamps: tuple[float, float, float]) -> Result:
    if "passed" not in reply:
        log.warning("sandbox: %s", reply.get("error"))
        return Result([False] * n_tests, sandboxed=isolate, notes=[f"sandbox error: {reply.get('error')}"])
    notes = list(reply["notes"])
    if reply.get("error"):
        log.warning("sandbox: %s", reply["error"])
        notes.insert(0, f"sandbox error: {reply['error']}")
    return Result(
        reply["passed"],
        reply["timed_out"],
        reply["exit_code"],
        reply["sandboxed"],
        reply["output_tail"],
        notes,
        _phases(reply["timings"], *stamps),
    )


def _phases(t: dict[str, float], created: float, sent: float, finished: float) -> dict[str, float]:
    """Milliseconds per phase from the processes' CLOCK_MONOTONIC stamps (one clock for the whole machine).

    Set-up phases (dispatch to the server, namespaces, judge fork, waiting for the payload) come before
    ``sent``; a batch overlaps them with the previous check, so ``latency`` counts from ``sent`` only.
    """
    marks = [
        ("dispatch", created, t.get("started")),
        ("namespaces", t.get("started"), t.get("namespaces")),
        ("fork_judge", t.get("namespaces"), t.get("forked")),
        ("waiting", t.get("forked"), t.get("payload")),
        ("load", t.get("payload"), t.get("loaded")),
        ("tests", t.get("loaded"), t.get("tests")),
        ("teardown", t.get("tests"), t.get("reaped")),
        ("reply", t.get("reaped"), finished),
        ("latency", sent, finished),
    ]
    return {name: round((b - a) * 1000, 3) for name, a, b in marks if a is not None and b is not None}
