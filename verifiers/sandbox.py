"""A sandbox for untrusted Python (model completions executed by the code reward).

Each check runs in fresh network, mount, IPC and PID namespaces, created per check by
:mod:`verifiers.sandbox_runtime` (a bare ``python -I -S`` fork server started once per process, which forks a
supervisor per session: one :func:`run_tests` call, or one worker of :func:`run_batch`):
- **no network**: the new network namespace has only a loopback interface, and it is down (abstract Unix
  sockets belong to the network namespace too);
- **no view of the host's files** (the jail, :func:`jail_available`): the check's root is a fresh tmpfs, made
  the root by ``pivot_root`` with the old root detached, that holds read-only binds of the interpreter's
  standard library (lib-dynload included, any site-packages masked) and of the directories of the shared
  libraries its extension modules load (found once per server by loading them in a scout process, e.g.
  /usr/lib/x86_64-linux-gnu), the loader's cache /etc/ld.so.cache, and the merged-/usr symlinks (/lib ->
  usr/lib). Its own: /tmp (the working directory) and /dev/shm, private tmpfs; a /dev with null, zero,
  random and urandom only; the /proc of its PID namespace. The checkout, the venv and its packages (and
  data sets such as HumanEval's, with the answers), data/, /etc, home directories and every path socket
  of the host are not in it; nothing can be executed either: the code's ``execve`` and ``execveat`` fail
  (seccomp: the checks fork, they never exec), which also holds for the dynamic loader that the library
  binds contain (they stay executable, for ``import`` maps extension modules from them); /tmp and /dev/shm
  are mounted noexec besides, and the code cannot make a memfd at all (see below).
  Binding the system's library directory exposes only system libraries, world-readable on any machine
  and needed by ``hashlib``, ``decimal``, ``ctypes``, ``sqlite3``...;
- **no writes outside its directory**: the jail's root is read-only, /tmp and /dev/shm are private, and the
  code runs as ``nobody`` with no_new_privs. SysV IPC objects live in the check's own IPC namespace;
- **no view of the host's processes**: the /proc of the new PID namespace; a cgroup namespace hides the
  host's cgroup paths;
- **one budget for all of a check's processes** (:func:`cgroups_available`): cgroups per session (v2 where
  its memory and pids controllers are enabled below this process's cgroup, else the v1 memory, pids and cpu
  hierarchies), made and joined by the session's supervisor before its first judge, so every process of
  its checks is born in them (a fork costs nothing there, a move between cgroups an RCU grace period), and
  removed when the session ends. A session runs one check at a time: the budget, ``total_memory_mb``
  without swap and ``max_processes`` plus four processes, is that check's, beside the supervisor and the
  idle sandbox set up ahead. The judges and candidates are the OOM killer's first choice;
- **one share of the CPU per check** (:func:`cpu_bound_available`): the session's cpu cgroup has the default
  weight, like every other session's, and at most ``cpus`` of CPU time per second, so a check that spins 30
  processes takes one share of the machine, not 30, and the check beside it keeps its time (a check that
  starved its neighbours, completions of the same prompt, would raise its own advantage);
- **limits**: rlimits on address space, CPU seconds, processes, file size, open files, queued signals and
  POSIX message queues (none); a wall-clock timeout kills the namespace's PID 1, and the kernel then kills
  every process left inside before the call returns (nothing survives by ``setsid`` or double-forking);
  captured output is capped, and the code's stdout is closed beyond the cap. Memory that no rlimit counts
  is closed or bounded: ``memfd_create`` fails (a seccomp filter, which also refuses every system call of
  another ABI), and the check's SysV shared memory is bounded by ``tmpfs_mb``, its message queues to 8. So
  without a cgroup, a check holds at most ``memory_mb`` per process, ``max_processes`` of them, plus its
  tmpfs mounts (``tmpfs_mb`` each) and its SysV shared memory (``tmpfs_mb``): pipe and socket buffers aside;
- **nothing charged to the host's root**: the code's processes become nobody, then enter a user namespace of
  their own (nobody mapped to itself, no capability kept), so RLIMIT_NPROC counts that check's processes
  only, even with checks running side by side, and every per-user count of the kernel (inotify instances,
  fanotify groups, namespaces, queued signals) is charged to nobody, never to host root, within limits
  of the namespace's own (:data:`~verifiers.sandbox_runtime.USER_NAMESPACE_LIMITS`: no namespace, 8 inotify
  instances). Where the kernel refuses user namespaces, all of nobody's processes share the count
  (:func:`user_namespaces_available`);
- **a verdict the completion cannot forge**: the tests run in a separate judge process that talks to the
  completion's process only in plain data (see the runtime module's docstring for the protocol).

What crosses the boundary: None, bool, int, float (inf/nan too), complex, str, bytes, range and
list/tuple/dict/set/frozenset of those, as exact builtin types, nesting and size capped; an iterator
result arrives as a list iterator of its items. The tests compare these genuine builtin values with
Python's own operators (so ``1 == 1.0`` holds, as in the test author's Python, but a tuple is never a
list and an ``__eq__`` of the completion's never runs). A call whose argument or result is anything else
(an instance of a completion's class, a lambda) fails its test, and so does a test that needs such an
object. In-place changes to arguments, and what the completion prints, are not seen by the tests (tests
that capture stdout fail). A call the completion answers by raising a builtin ``Exception`` raises it in the
test (a test may expect a ValueError); anything else it raises (its own classes, SystemExit, and the iteration
protocol's StopIteration and StopAsyncIteration, which would end a ``map`` or an ``async for`` quietly) raises
a ``CandidateError``, so the test that called it fails. A row may give trusted ``setup`` code, which the
judge runs in the tests' scope before them: a HumanEval prompt's helpers, so the tests use the row's and not
the completion's. The tests share one scope, as before, and the files of the check's /tmp.
Completion names that shadow a builtin are not visible to the tests, which always use the real builtins;
a module the completion imported is visible to the tests (as the judge's own import) only when it is on
``sandbox_runtime.JUDGE_MODULES``.

Checks run side by side (:func:`run_batch`) share the machine's cores and memory: each has one share of the
CPU (see above), so keep ``workers`` at or below the cores and the wall limit generous. A batch is faster
than a loop of :func:`run_tests` beyond its parallelism: each worker's supervisor
lives for the whole batch and sets up the next sandbox while the current check runs (a sandbox set up ahead
never sees a payload before its own, and the supervisor never sees any: the caller feeds the sandbox's pipes).

Where namespaces cannot be created, :func:`run_tests` refuses to run unless ``allow_unsandboxed`` is set,
which keeps only the rlimits, the separate judge and the timeout (processes that leave the process group
may survive it, and the host's /proc, network and world-writable directories are reachable). Where the
namespaces can be created but the jail cannot (pivot_root refused, e.g. a root on rootfs), the checks run
with namespaces alone and a warning says so once: private tmpfs mounts then cover every world-writable
directory (/tmp, /var/tmp, /dev/shm, /run/lock, /dev/mqueue), but the host's world-readable files and path
sockets are reachable. Where no cgroup can be made (an unprivileged container), a warning says so once, and
a check's memory is bounded only per process, ``memory_mb`` x ``max_processes`` in all plus its tmpfs and
SysV shared memory (see above); where no cpu cgroup can be made, a warning says so once, and the checks
share the CPU as their processes do.
"""

from __future__ import annotations

import array
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
from functools import lru_cache
from pathlib import Path

from verifiers.limits import Limits
from verifiers.sandbox_pipes import Result, _Pipes
from verifiers.sandbox_runtime import (
    NOBODY,  # noqa: F401 - part of this module's API (tests look for its processes)
)

log = logging.getLogger(__name__)

RUNTIME = Path(__file__).with_name("sandbox_runtime.py")
# The server starts with nothing of the caller's environment: no LD_PRELOAD or LD_LIBRARY_PATH can map a library
# from the venv into it, and so into every jail plan (its library scout reads its own memory map).
SERVER_ENV = {"PATH": "/usr/bin:/bin"}
GRACE_SECONDS = 10.0  # beyond the wall limit, before the caller gives up on a supervisor that never answers
SETUP_SECONDS = 30.0  # for a sandbox to be set up, before the caller gives up on its supervisor
_PROBE = ("import decimal, fractions, statistics\ndef f():\n    return 1", ["import heapq, bisect\nassert f() == 1"])


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


@lru_cache(maxsize=1)
def jail_available() -> bool:
    """Whether each check can get a root of its own (a tmpfs holding only the standard library, read-only, and
    private /tmp, /dev and /proc: the runtime's ``enter_jail``). Where not, says so once: the code then sees the
    host's world-readable files and path sockets, as with namespaces alone."""
    if not isolation_available():
        return False
    if _probe("probe-jail"):
        return True
    log.warning(
        "sandbox: cannot build the read-only root (pivot_root into a tmpfs) here; the sandboxed code can read "
        "every world-readable file of this machine and connect to its path sockets"
    )
    return False


@lru_cache(maxsize=1)
def cgroups_available() -> bool:
    """Whether each check can get cgroups of its own, which bound its processes' memory together
    (``total_memory_mb``) and their number. Where not (an unprivileged container), says so once."""
    if not isolation_available():
        return False
    if _probe("probe-cgroup"):
        return True
    limits = Limits()
    log.warning(
        "sandbox: no cgroup can be made here (needs write access to a cgroup v2 directory with memory and pids "
        "controllers, or to the v1 memory hierarchy): a check's memory is bounded only per process, memory_mb x "
        "max_processes in all (%d MB x %d by default), plus its tmpfs mounts and SysV shared memory (tmpfs_mb "
        "each)",
        limits.memory_mb,
        limits.max_processes,
    )
    return False


@lru_cache(maxsize=1)
def cpu_bound_available() -> bool:
    """Whether each check's cgroups bound its CPU time too (``cpus``), so that a check's share of the machine does
    not shrink with the processes of the check beside it. Where not, says so once."""
    if not cgroups_available():
        return False
    if _probe("probe-cgroup-cpu"):
        return True
    log.warning(
        "sandbox: no cpu cgroup can be made here (needs the cpu controller beside memory and pids): a check that "
        "spins many processes takes CPU time from the checks beside it, which may then time out"
    )
    return False


def _probe(what: str) -> bool:
    probe = subprocess.run(
        [sys.executable, "-I", "-S", str(RUNTIME), what], env=SERVER_ENV, capture_output=True, timeout=30, check=False
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
                env=SERVER_ENV,
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
        session = _Session(server, Limits(), isolate)
        try:
            probe = session.check(*_PROBE, more=False)
        finally:
            session.close()
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


def _validate(code: object, tests: object, where: str, setup: object = "") -> None:
    if not isinstance(code, str):
        raise ValueError(f"{where}: field 'code' must be a str, got {type(code).__name__}")
    if not isinstance(tests, (list, tuple)) or not all(isinstance(t, str) for t in tests):
        raise ValueError(f"{where}: field 'tests' must be a list of str")
    if not isinstance(setup, str):
        raise ValueError(f"{where}: field 'setup' must be a str, got {type(setup).__name__}")


def run_tests(
    code: str,
    tests: Sequence[str],
    limits: Limits = Limits(),
    *,
    setup: str = "",
    allow_unsandboxed: bool | None = None,
) -> Result:
    """Run ``code`` then each test in ``tests`` separately; one bool per test.

    ``setup`` is trusted code that the judge runs in the tests' scope before them (a HumanEval prompt's helper
    functions): its names replace the completion's for the tests. Tests that finished before a timeout or crash
    keep their verdict; the rest count as failed. ``allow_unsandboxed``, when given, overrides
    ``limits.allow_unsandboxed``.
    """
    _validate(code, tests, "run_tests", setup)
    session = _open_session(limits, _isolation(limits, allow_unsandboxed))
    try:
        return session.check(code, list(tests), more=False, setup=setup)
    finally:
        session.close()


def run_batch(
    items: Sequence[tuple[str, Sequence[str]] | tuple[str, Sequence[str], str]],
    limits: Limits = Limits(),
    *,
    workers: int | None = None,
    allow_unsandboxed: bool | None = None,
) -> list[Result]:
    """:func:`run_tests` for each ``(code, tests)`` or ``(code, tests, setup)``, ``workers`` (default
    ``limits.workers``) checks at a time.

    Each worker has a session: a supervisor that runs its checks one after another, each in a sandbox of its
    own (namespaces, tmpfs, processes and limits, exactly as when run alone), and sets up the next sandbox
    while the current check runs. The setup never sees a payload, and the supervisor never sees any check's
    data (see the runtime's :class:`~verifiers.sandbox_runtime.Sandbox`), so no check can learn another's.
    """
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise ValueError(
                f"row {i}: expected a (code, tests) pair or (code, tests, setup), got {type(item).__name__}"
            )
        _validate(item[0], item[1], f"row {i}", item[2] if len(item) == 3 else "")
    isolate = _isolation(limits, allow_unsandboxed)
    results: list[Result | None] = [None] * len(items)
    indices = iter(range(len(items)))
    lock = threading.Lock()

    def next_index() -> int | None:
        with lock:
            return next(indices, None)

    def work() -> None:
        session: _Session | None = None
        try:
            i = next_index()
            while i is not None:
                following = next_index()  # claimed now, so the supervisor knows whether to set up another sandbox
                if session is None or session.broken:
                    if session is not None:
                        session.close()
                    session = _open_session(limits, isolate)
                item = items[i]
                setup = item[2] if len(item) == 3 else ""
                results[i] = session.check(item[0], list(item[1]), more=following is not None, setup=setup)
                i = following
        finally:
            if session is not None:
                session.close()

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


def _open_session(limits: Limits, isolate: bool) -> _Session:
    try:
        return _Session(_get_server(), limits, isolate)
    except _ServerGone:
        return _Session(_get_server(restart=True), limits, isolate)


class _NoSandbox(Exception):
    """The supervisor could not give a sandbox (it failed to set one up, or is gone)."""


class _Session:
    """One supervisor of the fork server, for checks run one after another (one per worker of a batch).

    Each check gets a fresh sandbox that the supervisor set up ahead; this side writes the payload into the
    sandbox's pipes and reads the verdicts and output from them (see the runtime's ``run_session``).
    """

    def __init__(self, server: _Server, limits: Limits, isolate: bool) -> None:
        self.limits = limits
        self.isolate = isolate
        self.broken = False  # no further check can run on it
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with theirs:
                server.submit(theirs)
        except OSError as exc:
            self.sock.close()
            raise _ServerGone(str(exc)) from exc
        cfg = {
            **limits.model_dump(),
            "isolate": isolate,
            "userns": isolate and user_namespaces_available(),
            "jail": isolate and jail_available(),
            "cgroup": isolate and cgroups_available(),
            "cpu_bound": isolate and cpu_bound_available(),
        }
        try:
            self.sock.send(json.dumps(cfg).encode())
        except OSError:
            pass  # the supervisor is gone already: check() reads the closed socket and reports it

    def check(self, code: str, tests: list[str], *, more: bool, setup: str = "") -> Result:
        """Run one check in the next sandbox; ``more`` asks the supervisor to set up another one meanwhile."""
        created = time.monotonic()
        try:
            pipes = _Pipes(self._ready())
        except _NoSandbox as exc:
            self.broken = True
            return self._failure(len(tests), str(exc), timed_out=False)
        try:
            return self._run(pipes, code, tests, more, created, setup)
        finally:
            pipes.close()

    def _run(self, pipes: _Pipes, code: str, tests: list[str], more: bool, created: float, setup: str) -> Result:
        deadline = time.monotonic() + self.limits.wall_seconds + GRACE_SECONDS
        try:
            self.sock.send(b"m" if more else b"g")  # the wall-clock limit starts now, before the payload exists
        except OSError as exc:
            self.broken = True
            return self._failure(len(tests), f"no answer from the supervisor ({type(exc).__name__})", timed_out=False)
        sent = time.monotonic()
        judge_input = json.dumps({"tests": tests, "setup": setup}).encode("utf-8", "surrogatepass")
        pipes.feed(judge_input, code.encode("utf-8", "surrogatepass"))
        if not pipes.collect(deadline, self.limits.max_output_kb * 1024):
            self.broken = True
            return self._failure(len(tests), "no answer from the supervisor (TimeoutError)", timed_out=True)
        try:
            outcome = self._message(deadline - time.monotonic())
        except _NoSandbox as exc:
            self.broken = True
            return self._failure(len(tests), str(exc), timed_out=isinstance(exc.__cause__, TimeoutError))
        pipes.drain(self.limits.max_output_kb * 1024)
        return pipes.result(len(tests), outcome, self.isolate, self.limits, (created, sent, time.monotonic()))

    def _ready(self) -> list[int]:
        """The pipes of the next sandbox: tests and code (to write), verdicts and output (to read).

        Received close-on-exec (MSG_CMSG_CLOEXEC, atomically), like every other descriptor this side holds
        (Python's sockets and pipes), so no program this process executes inherits one.
        """
        self.sock.settimeout(SETUP_SECONDS)
        try:
            message, ancillary, flags, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC)
        except OSError as exc:
            raise _NoSandbox(f"no answer from the supervisor ({type(exc).__name__})") from exc
        fds = _received_fds(ancillary)
        if message == b"r" and len(fds) == 4 and not flags & socket.MSG_CTRUNC:
            return fds
        for fd in fds:
            os.close(fd)
        raise _NoSandbox(_error_of(message))

    def _message(self, timeout: float) -> dict:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            message = self.sock.recv(1 << 16)
        except OSError as exc:
            raise _NoSandbox(f"no answer from the supervisor ({type(exc).__name__})") from exc
        try:
            reply = json.loads(message) if message else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or "exit_code" not in reply:
            raise _NoSandbox(_error_of(message))
        return reply

    def _failure(self, n_tests: int, why: str, *, timed_out: bool) -> Result:
        log.warning("sandbox: %s", why)
        return Result([False] * n_tests, timed_out=timed_out, sandboxed=self.isolate, notes=[f"sandbox error: {why}"])

    def close(self) -> None:
        """Hang up: the supervisor discards a sandbox set up ahead and not used, then exits."""
        self.sock.close()


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _error_of(message: bytes) -> str:
    """The supervisor's explanation in an ``{"error"}`` message, or what else went wrong."""
    if not message:
        return "no answer from the supervisor (EOFError)"
    try:
        return str(json.loads(message)["error"])
    except (ValueError, KeyError, TypeError):
        return "the supervisor broke the protocol"
