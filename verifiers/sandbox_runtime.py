"""The process side of :mod:`verifiers.sandbox`: standard library only, run as ``python -I -S <this file> serve FD``.

Process tree of one check (every arrow is a plain ``fork``, no ``exec``: the interpreter is already warm)::

    fork server (root, host namespaces, clean env; never reads a payload)
      └─ supervisor (root, host PID namespace; unshares net/mount/IPC/PID, mounts private tmpfs, times the check)
           └─ judge = PID 1 of the new PID namespace (mounts /proc, then nobody, non-dumpable, signals blocked)
                └─ candidate (own user namespace, then nobody, no_new_privs): loads the completion, then
                   answers calls to its top-level names

The judge alone holds the verdict pipe; the candidate holds only its RPC socket, its output pipe and
(while loading) its code pipe. The judge runs the tests with a :class:`Proxy` for each candidate name;
arguments and results cross as plain data (:func:`encode` / :func:`decode`), rebuilt as exact builtin
types, so nothing the candidate defines (an ``__eq__`` that is always true, a patched ``exec``) ever
runs in the judge. The tests reach the judge after the candidate was forked, over a pipe the candidate
never held, so the expected values never exist in the candidate's memory.

As PID 1 the judge cannot be signalled from inside its namespace, and when it exits (or the supervisor
kills it at the wall timeout) the kernel kills every process left in the namespace before the
supervisor's ``waitpid`` returns: nothing outlives a check (pid_namespaces(7)).
"""

from __future__ import annotations

import builtins
import collections.abc
import ctypes
import fcntl
import gc
import importlib
import json
import os
import re
import resource
import select
import signal
import socket
import sys
import time
from typing import Any

NOBODY = 65534
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # one call's arguments or result, JSON-encoded
MAX_DEPTH = 100  # nesting of one plain value
MAX_ITEMS = 1_000_000  # nodes in one plain value (an iterator is materialised up to this)
TAIL_BYTES = 2000
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")

# <sched.h>, <sys/mount.h>, <sys/prctl.h>
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
CLONE_NEWUSER = 0x10000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = 1, 4, 15, 38

# Modules the judge imports for itself when the completion imported them under a name a test uses (MBPP tests
# often say ``math.isclose`` and rely on the code's ``import math``). An allowlist: importing a module runs
# its top-level code in the judge, and some (``unittest.__main__`` discovering tests in the cwd) would run
# files the candidate wrote.
JUDGE_MODULES = frozenset(
    "array bisect calendar cmath collections collections.abc copy dataclasses datetime decimal enum fractions "
    "functools hashlib heapq itertools json math numbers operator os os.path posixpath random re statistics "
    "string struct sys textwrap time types typing unicodedata".split()
)
_SAFE_INT = 2**53
_IDENT = re.compile(r"[^\W\d]\w*")
_libc_handle = None


# ----------------------------------------------------------------------------------------------- plain data


class NotPlain(TypeError):
    """A value that may not cross the sandbox boundary: not one of the exact builtin plain types, or too big."""


def encode(value: Any, *, proxy_type: type | None = None) -> Any:
    """A JSON-able tree for a plain value: exact builtin types only, nesting and size capped."""
    return _encode(value, 0, [MAX_ITEMS], proxy_type)


def _encode(value: Any, depth: int, budget: list[int], proxy_type: type | None) -> Any:
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    budget[0] -= 1
    if budget[0] < 0:
        raise NotPlain(f"more than {MAX_ITEMS} items")
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if -_SAFE_INT < value < _SAFE_INT else ["i", format(value, "x")]
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is bytes:
        return ["b", value.hex()]
    tag = _CONTAINER_TAGS.get(kind)  # type: ignore[call-overload]  # any type may be asked for
    if tag is not None:
        return [tag, *(_encode(item, depth + 1, budget, proxy_type) for item in value)]
    if kind is dict:
        out = ["d"]
        for key, item in value.items():
            out += [_encode(key, depth + 1, budget, proxy_type), _encode(item, depth + 1, budget, proxy_type)]
        return out
    if kind is range:
        return ["r", *(_encode(v, depth + 1, budget, proxy_type) for v in (value.start, value.stop, value.step))]
    if proxy_type is not None and kind is proxy_type:
        return ["ref", value._name]
    if isinstance(value, collections.abc.Iterator):  # a generator, map, zip...: its items, as a list iterator
        return ["it", *(_encode(item, depth + 1, budget, proxy_type) for item in value)]
    raise NotPlain(f"{kind.__name__} is not plain data")


_CONTAINER_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}
_BUILDERS = {"l": list, "t": tuple, "s": set, "f": frozenset, "it": lambda items: iter(list(items))}


def decode(node: Any, refs: dict | None = None) -> Any:
    """The plain value for a tree from :func:`encode`; ``["ref", name]`` resolves in ``refs`` when given."""
    try:
        return _decode(node, 0, refs)
    except (TypeError, ValueError, KeyError, OverflowError, RecursionError) as exc:
        if isinstance(exc, NotPlain):
            raise
        raise NotPlain(f"malformed value: {type(exc).__name__}") from None


def _decode(node: Any, depth: int, refs: dict | None) -> Any:
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    kind = type(node)
    if node is None or kind is bool or kind is int or kind is float or kind is str:
        return node
    if kind is not list or not node or type(node[0]) is not str:
        raise NotPlain("malformed value")
    tag, items = node[0], node[1:]
    if tag in _BUILDERS:
        builder: Any = _BUILDERS[tag]
        return builder(_decode(item, depth + 1, refs) for item in items)
    if tag == "d" and len(items) % 2 == 0:
        values = [_decode(item, depth + 1, refs) for item in items]
        return dict(zip(values[0::2], values[1::2]))
    return _decode_scalar(tag, items, depth, refs)


def _decode_scalar(tag: str, items: list, depth: int, refs: dict | None) -> Any:
    if tag == "i" and len(items) == 1 and type(items[0]) is str:
        return int(items[0], 16)
    if tag == "c" and len(items) == 2 and all(type(v) in (int, float) for v in items):
        return complex(items[0], items[1])
    if tag == "b" and len(items) == 1 and type(items[0]) is str:
        return bytes.fromhex(items[0])
    if tag == "r" and len(items) == 3:
        bounds = [_decode(v, depth + 1, None) for v in items]
        if all(type(v) is int for v in bounds):
            return range(*bounds)
    if tag == "ref" and refs is not None and len(items) == 1 and type(items[0]) is str:
        return refs[items[0]]
    raise NotPlain(f"malformed value (tag {tag[:20]!r})")


# ------------------------------------------------------------------------------------------- frames on fds


class FrameTooLarge(ValueError):
    """A length-prefixed message over its size limit."""


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (a pipe or socket may take fewer per call)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd: int, n: int) -> bytes:
    """Exactly ``n`` bytes (and not one more, so that nothing after them sits in this process's memory)."""
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("peer closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_all(fd: int) -> bytes:
    """Everything until EOF."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def send_frame(fd: int, obj: Any) -> None:
    """One length-prefixed JSON message."""
    data = json.dumps(obj).encode()
    write_all(fd, len(data).to_bytes(4, "big") + data)


def recv_frame(fd: int, limit: int = MAX_MESSAGE_BYTES) -> Any:
    """One length-prefixed JSON message, refused beyond ``limit`` bytes."""
    size = int.from_bytes(read_exact(fd, 4), "big")
    if size > limit:
        raise FrameTooLarge(f"message of {size} bytes exceeds {limit}")
    return json.loads(read_exact(fd, size))


# ---------------------------------------------------------------------------------------- process plumbing


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def _check_call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, value: int) -> None:
    """prctl(2) with one argument."""
    _check_call(_libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def set_name(name: bytes) -> None:
    """The process name in ps and /proc/PID/comm (which part of the sandbox this is)."""
    _libc().prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def mount(source: str, target: str, fstype: str | None, flags: int, options: str | None = None) -> None:
    """mount(2)."""
    args = [None if arg is None else arg.encode() for arg in (source, target, fstype)]
    data = None if options is None else options.encode()
    _check_call(_libc().mount(*args, ctypes.c_ulong(flags), data), f"mount {target}")


def enter_namespaces(tmpfs_mb: int) -> None:
    """Unshare network, mount, IPC and PID namespaces; private tmpfs on every world-writable directory.

    The PID namespace applies to the children forked after this (the first becomes its PID 1).
    """
    _check_call(_libc().unshare(NAMESPACES), "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
    for path in WRITABLE_DIRS:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=1777")


def arrange_fds(targets: dict[int, int]) -> None:
    """Make descriptors 0..n-1 copies of the given sources and close every other one."""
    assert sorted(targets) == list(range(len(targets)))
    base = max([*targets, *targets.values()]) + 1
    high = {target: fcntl.fcntl(source, fcntl.F_DUPFD, base) for target, source in targets.items()}
    for target, fd in high.items():
        os.dup2(fd, target)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    # close_range(2) on Linux >= 5.9, so a large bound costs nothing; RLIM_INFINITY reads as -1
    os.closerange(len(targets), max(soft if soft > 0 else 1 << 20, base + len(targets)) + 1)


def drop_privileges(cfg: dict, workdir: str) -> None:
    """The rlimits, then ``nobody`` (when root), a clean environment and the sandbox's directory."""
    mb = 1024 * 1024
    limits = (
        (resource.RLIMIT_AS, cfg["memory_mb"] * mb),
        (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
        (resource.RLIMIT_NPROC, cfg["max_processes"]),
        (resource.RLIMIT_FSIZE, cfg["max_file_mb"] * mb),
        (resource.RLIMIT_NOFILE, cfg["max_open_files"]),
        (resource.RLIMIT_CORE, 0),
    )
    for limit, value in limits:
        resource.setrlimit(limit, (value, value))
    if os.getuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(PATH="/usr/bin:/bin", HOME=workdir)


# ----------------------------------------------------------------------------------------------- candidate


def candidate_main(fds: dict[str, int], cfg: dict, workdir: str) -> None:
    """Load the completion as nobody, announce its names, then answer the judge's calls until it hangs up."""
    set_name(b"sandbox-code")
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the judge ignores it; the completion may wait for children
    null = os.open(os.devnull, os.O_RDWR)
    arrange_fds(
        {0: null, 1: fds["out_w"], 2: fds["out_w"], 3: fds["rpc_candidate"], 4: fds["code_r"], 5: fds["sync_candidate"]}
    )
    if cfg["isolate"] and cfg.get("userns"):
        own_user_namespace(sync=5)
    os.close(5)
    drop_privileges(cfg, workdir)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary or file capability raises it again
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it (prctl(2)); matters without a PID ns
    code = read_all(4).decode("utf-8", "surrogatepass")
    os.close(4)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper here
    scope = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(code, "<completion>", "exec"), scope)
    except BaseException as exc:  # noqa: B036 - SystemExit in a completion is a load failure too
        send_frame(3, ["load_error", type(exc).__name__])
        return
    send_frame(3, ["loaded", describe(scope)])
    while True:
        try:
            request = recv_frame(3)
        except (EOFError, OSError):
            return
        send_frame(3, answer(request, scope))


def own_user_namespace(sync: int) -> None:
    """Enter a user namespace of its own, mapped by the judge, so that RLIMIT_NPROC counts this sandbox only.

    The kernel counts a uid's processes per user namespace and charges the parent level to the namespace's
    creator (root here, unlimited): without this, a fork bomb in one sandbox would make ``fork`` fail in
    every sandbox running beside it (user_namespaces(7), kernel/ucount.c). Mapped uids: 0 and nobody, to
    themselves, so files keep their owners and the switch to nobody clears every capability. Where the
    kernel refuses (user namespaces disabled), the count stays shared by all of nobody's processes.
    """
    entered = _libc().unshare(CLONE_NEWUSER) == 0
    os.write(sync, b"u" if entered else b"n")
    if os.read(sync, 1) != b"k":
        raise OSError("the judge did not map the candidate's user namespace")


def map_user_namespace(pid: int, sync: int) -> None:
    """The judge's half of :func:`own_user_namespace`: write the child's uid and gid maps (needs root)."""
    if os.read(sync, 1) == b"u":
        for name in ("uid_map", "gid_map"):
            fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
            try:
                os.write(fd, f"0 0 1\n{NOBODY} {NOBODY} 1\n".encode())
            finally:
                os.close(fd)
    os.write(sync, b"k")


def describe(scope: dict) -> dict[str, list]:
    """Each top-level name's kind: a module (by its import name), something callable, or a value."""
    kinds = {}
    for name, obj in list(scope.items()):
        if type(name) is not str or name.startswith("__"):
            continue
        try:
            if isinstance(obj, type(sys)):
                kinds[name] = ["module", str(obj.__name__)]
            else:
                kinds[name] = ["call"] if callable(obj) else ["value"]
        except Exception:
            continue
    return kinds


def answer(request: Any, scope: dict) -> list:
    """The reply to one judge request: ``ok`` with a plain value, ``raise`` with an exception, or ``bad``."""
    try:
        kind, seq, name = request[0], request[1], request[2]
        target = scope[name]
        if kind == "get":
            return ["ok", seq, encode(target)]
        args, kwargs = decode(request[3], scope), decode(request[4], scope)
    except Exception as exc:
        return ["bad", request[1] if isinstance(request, list) and len(request) > 1 else None, repr(exc)[:200]]
    try:
        value = target(*args, **kwargs)
    except BaseException as exc:  # noqa: B036 - whatever the completion raises is its answer
        return ["raise", seq, type(exc).__name__, _safe_str(exc)]
    try:
        return ["ok", seq, encode(value)]
    except BaseException as exc:  # noqa: B036 - NotPlain, or an iterator that raised while materialised
        return ["bad", seq, f"{type(exc).__name__}: {_safe_str(exc)}"]


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except BaseException:  # noqa: B036
        return "<unprintable>"


# --------------------------------------------------------------------------------------------------- judge


class BoundaryError(BaseException):
    """A call into the candidate that cannot count as answered: it died, hung up, or returned a non-plain value.

    A ``BaseException``, so that a test's ``except Exception`` cannot turn it into a pass.
    """


class CandidateError(Exception):
    """The candidate raised an exception that is not a builtin one (its type name and message)."""


class Channel:
    """The judge's end of the RPC socket: one request, one reply, in order."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seq = 0
        self.broken = ""

    def request(self, kind: str, name: str, *rest: Any) -> list:
        """Send one request and return the candidate's checked reply."""
        if self.broken:
            raise BoundaryError(self.broken)
        self.seq += 1
        try:
            send_frame(self.fd, [kind, self.seq, name, *rest])
            reply = recv_frame(self.fd)
        except Exception as exc:  # closed, too large, not JSON, nested past the parser's recursion limit
            self.broken = f"candidate unreachable ({type(exc).__name__})"
            raise BoundaryError(self.broken) from None
        if type(reply) is not list or len(reply) < 3 or reply[1] != self.seq or reply[0] not in ("ok", "raise", "bad"):
            self.broken = "candidate broke the protocol"
            raise BoundaryError(self.broken)
        return reply


class Proxy:
    """Stands in the test scope for one of the candidate's callables; only plain data crosses."""

    __slots__ = ("_channel", "_name")

    def __init__(self, channel: Channel, name: str) -> None:
        self._channel = channel
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            payload = encode(list(args), proxy_type=Proxy), encode(kwargs, proxy_type=Proxy)
        except NotPlain as exc:
            raise BoundaryError(f"argument to {self._name} is not plain data: {exc}") from None
        reply = self._channel.request("call", self._name, *payload)
        return _unwrap(reply, self._name)

    def __repr__(self) -> str:
        return f"<candidate {self._name}>"


def _unwrap(reply: list, name: str) -> Any:
    if reply[0] == "ok":
        try:
            return decode(reply[2])
        except NotPlain as exc:
            raise BoundaryError(f"{name} returned no plain data: {exc}") from None
    if reply[0] == "raise" and len(reply) == 4:
        raise _candidate_exception(reply[2], reply[3])
    raise BoundaryError(f"{name}: {str(reply[2])[:200]}")


def _candidate_exception(type_name: Any, message: Any) -> Exception:
    """The builtin exception the candidate raised (so tests that expect e.g. ValueError work), else CandidateError."""
    cls = getattr(builtins, type_name, None) if type(type_name) is str else None
    text = str(message)[:500]
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(text)
        except Exception:
            pass
    return CandidateError(f"{str(type_name)[:100]}: {text}")


def build_scope(kinds: Any, tests: list[str], channel: Channel) -> dict:
    """The test scope: real builtins, plus each candidate name the tests mention that does not shadow a builtin."""
    scope: dict = {"__name__": "__main__", "__builtins__": builtins}
    if type(kinds) is not dict:
        return scope
    mentioned = set(_IDENT.findall("\n".join(tests)))
    for name, spec in kinds.items():
        if type(name) is not str or not name.isidentifier() or name.startswith("__") or name not in mentioned:
            continue
        if hasattr(builtins, name):
            continue  # a shadowed builtin would let `set(f(x)) == set(y)` compare the candidate's own answers
        if type(spec) is not list or not spec:
            continue
        if spec[0] == "call":
            scope[name] = Proxy(channel, name)
        elif spec[0] == "module" and len(spec) == 2:
            module = _stdlib_module(spec[1])
            if module is not None:
                scope[name] = module
        elif spec[0] == "value":
            try:
                scope[name] = _unwrap(channel.request("get", name), name)
            except BaseException:  # noqa: B036 - an unusable value is left out; a test naming it then fails
                continue
    return scope


def _stdlib_module(name: Any) -> Any:
    """The judge's own import of an allowed module the candidate imported (never the candidate's object)."""
    if type(name) is not str or name not in JUDGE_MODULES:
        return None
    try:
        return importlib.import_module(name)
    except BaseException:  # noqa: B036 - the name is then missing, and a test that uses it fails
        return None


def judge_main(fds: dict[str, int], cfg: dict, workdir: str) -> None:
    """PID 1 of the sandbox: start the candidate, drop to nobody, run the tests, write the verdicts."""
    try:
        _start_judge(fds, cfg, workdir)
    except Exception as exc:  # a setup failure is the sandbox's, not the completion's: say so
        _report(fds["verdict_w"], f"E {type(exc).__name__}: {exc}"[:300])
        os._exit(1)
    tests = json.loads(read_all(3))
    os.close(3)
    run_judge(tests, Channel(5), verdicts=4)


def _start_judge(fds: dict[str, int], cfg: dict, workdir: str) -> None:
    set_name(b"sandbox-judge")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if cfg["isolate"]:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this namespace's processes only
    else:
        os.setpgid(0, 0)  # without a PID namespace, the supervisor kills this process group instead
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # as init, reap every orphan at once (zombies count for NPROC)
    sync, fds["sync_candidate"] = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    candidate = os.fork()
    if candidate == 0:
        try:
            candidate_main(fds, cfg, workdir)
        finally:
            os._exit(0)
    os.close(fds["sync_candidate"])
    if cfg["isolate"] and cfg.get("userns"):
        map_user_namespace(candidate, sync)
    os.close(sync)
    null = os.open(os.devnull, os.O_RDWR)
    arrange_fds({0: null, 1: null, 2: null, 3: fds["tests_r"], 4: fds["verdict_w"], 5: fds["rpc_judge"]})
    fds["verdict_w"] = 4
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # an init gets no signal from its namespace unless it handles it
    drop_privileges(cfg, workdir)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_DUMPABLE, 0)  # /proc/1/{fd,mem} root-owned, no ptrace: the candidate shares the uid
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())


def run_judge(tests: list[str], channel: Channel, verdicts: int) -> None:
    """Wait for the candidate to load, then run each test in one scope and report ``P i`` or ``F i Type``."""
    try:
        hello = recv_frame(channel.fd)
    except Exception:
        hello = ["load_error", "no answer (exited or crashed while loading)"]
    _report(verdicts, f"T loaded {time.monotonic()}")
    if type(hello) is not list or len(hello) != 2 or hello[0] != "loaded":
        reason = hello[1] if type(hello) is list and len(hello) == 2 else "protocol error"
        _report(verdicts, f"N code failed to load: {_printable(reason)}")
        _report(verdicts, "D")
        os._exit(0)
    scope = build_scope(hello[1], tests, channel)
    for i, test in enumerate(tests):
        try:
            exec(compile(test, f"<test {i}>", "exec"), scope)
            line = f"P {i}"
        except BaseException as exc:  # noqa: B036 - any exception fails this test only
            line = f"F {i} {type(exc).__name__}"
        _report(verdicts, line)
    _report(verdicts, f"T tests {time.monotonic()}")
    _report(verdicts, "D")
    os._exit(0)


def _report(fd: int, line: str) -> None:
    try:
        write_all(fd, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        os._exit(1)


def _printable(text: Any) -> str:
    return re.sub(r"[^\w .:()-]", "?", str(text))[:120]


# ---------------------------------------------------------------------------------------------- supervisor


class Supervisor:
    """One check, as root outside the sandbox: set it up, feed it, time it, collect the verdicts, tear it down."""

    def __init__(self, conn: int, cfg: dict, started: float) -> None:
        self.conn = conn
        self.cfg = cfg
        self.isolate = bool(cfg["isolate"])
        self.timings = {"started": started}
        self.judge = 0
        self.n_tests = 0
        self.reaped = False
        self.timed_out = False
        self.verdicts = b""
        self.output = b""
        self.output_seen = 0
        self.out_fd = -1
        self.truncated = False
        self.error = ""
        self.notes: list[str] = []

    def run(self) -> dict:
        """The whole check; returns the reply for the caller. No process of the sandbox outlives it."""
        fds = self._pipes()
        workdir = self._workdir()
        try:
            return self._run_in(workdir, fds)
        finally:
            if not self.isolate:  # an isolated workdir is a tmpfs that vanishes with its mount namespace
                import shutil

                shutil.rmtree(workdir, ignore_errors=True)

    def _run_in(self, workdir: str, fds: dict[str, int]) -> dict:
        self.timings["namespaces"] = time.monotonic()
        self.judge = os.fork()
        if self.judge == 0:
            try:
                judge_main(fds, self.cfg, workdir)
            finally:
                os._exit(1)
        for key in ("verdict_w", "tests_r", "code_r", "out_w", "rpc_judge", "rpc_candidate"):
            os.close(fds[key])
        self.timings["forked"] = time.monotonic()
        self.out_fd = fds["out_r"]
        try:
            status = self._check(fds)
        except BaseException:
            self._abort()
            raise
        self.timings["reaped"] = time.monotonic()
        self._drain(fds["verdict_r"])
        return self._reply(status)

    def _check(self, fds: dict[str, int]) -> int:
        """Wait for the payload (a sandbox may be set up ahead of it), then run it under the wall-clock limit."""
        payload = recv_frame(self.conn, limit=1 << 31)  # read only now: no copy of it in the sandbox's memory
        self.timings["payload"] = time.monotonic()
        signal.signal(signal.SIGALRM, self._on_deadline)
        signal.setitimer(signal.ITIMER_REAL, float(self.cfg["wall_seconds"]))
        self.n_tests = self._feed(fds, payload["tests"], payload["code"])
        self._collect(fds["verdict_r"])
        return self._reap()

    def _abort(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        self._kill()
        if not self.reaped:
            os.waitpid(self.judge, 0)
            self.reaped = True

    def _pipes(self) -> dict[str, int]:
        fds = {}
        for name in ("verdict", "tests", "code", "out"):
            fds[f"{name}_r"], fds[f"{name}_w"] = os.pipe()
        judge_end, candidate_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds["rpc_judge"], fds["rpc_candidate"] = judge_end.detach(), candidate_end.detach()
        return fds

    def _workdir(self) -> str:
        if self.isolate:
            enter_namespaces(int(self.cfg["tmpfs_mb"]))
            return "/tmp"
        import tempfile

        workdir = tempfile.mkdtemp(prefix="grpoflow-sandbox-")
        os.chmod(workdir, 0o777)
        return workdir

    def _on_deadline(self, signum: int, frame: Any) -> None:
        # Killing the judge (PID 1) ends the namespace, which closes every pipe: each blocking call returns.
        self.timed_out = True
        self._kill()

    def _kill(self) -> None:
        if self.reaped:
            return  # the pid may belong to someone else by now
        for kill in (os.kill, os.killpg) if not self.isolate else (os.kill,):
            try:
                kill(self.judge, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _feed(self, fds: dict[str, int], tests: list[str], code: str) -> int:
        """The tests to the judge first (it never runs completion code), then the code to the candidate."""
        inputs = ((fds["tests_w"], json.dumps(tests).encode()), (fds["code_w"], code.encode("utf-8", "surrogatepass")))
        for fd, data in inputs:
            try:
                write_all(fd, data)
            except BrokenPipeError:
                self.notes.append("sandbox: a sandboxed process died before reading its input")
            os.close(fd)
        return len(tests)

    def _collect(self, verdict_r: int) -> None:
        """Read verdicts until the judge's pipe closes, and the candidate's output up to the cap."""
        poller = select.poll()
        poller.register(verdict_r, select.POLLIN)
        poller.register(self.out_fd, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == verdict_r:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return
                    self.verdicts += chunk
                elif fd == self.out_fd and not self._take_output(os.read(fd, 65536)):
                    poller.unregister(fd)

    def _take_output(self, chunk: bytes) -> bool:
        """Keep the tail of the candidate's output; False (and the pipe closed) at EOF or past the cap."""
        self.output_seen += len(chunk)
        self.output = (self.output + chunk)[-TAIL_BYTES:]
        if chunk and self.output_seen <= self.cfg["max_output_kb"] * 1024:
            return True
        self.truncated = self.truncated or bool(chunk)
        os.close(self.out_fd)  # past the cap, stop reading: further writes get EPIPE, nobody's memory grows
        self.out_fd = -1
        return False

    def _reap(self) -> int:
        # Wait without reaping, stop the timer, then reap: a timer firing after the reap could kill a reused pid.
        os.waitid(os.P_PID, self.judge, os.WEXITED | os.WNOWAIT)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if not self.isolate:
            self._kill()  # the candidate and its process group (escaped sessions survive: no PID namespace)
        status = os.waitpid(self.judge, 0)[1]
        self.reaped = True
        return status

    def _drain(self, verdict_r: int) -> None:
        """Whatever the judge wrote before it died, and what output is left, without waiting for more."""
        os.set_blocking(verdict_r, False)
        try:
            while chunk := os.read(verdict_r, 65536):
                self.verdicts += chunk
        except BlockingIOError:
            pass
        if self.out_fd >= 0:
            os.set_blocking(self.out_fd, False)  # without a PID namespace an escaped process may hold it open
            try:
                while self.out_fd >= 0 and self._take_output(os.read(self.out_fd, 65536)):
                    pass
            except BlockingIOError:
                pass

    def _reply(self, status: int) -> dict:
        n_tests = self.n_tests
        passed = [False] * n_tests
        finished = False
        for line in self.verdicts.decode("utf-8", "replace").splitlines():
            kind, _, rest = line.partition(" ")
            if kind in ("P", "F") and rest.split(" ")[0].isdigit() and int(rest.split(" ")[0]) < n_tests:
                passed[int(rest.split(" ")[0])] = kind == "P"
            elif kind == "N" and len(self.notes) < 20:
                self.notes.append(rest)
            elif kind == "E":
                self.error = rest
            elif kind == "T" and rest.count(" ") == 1:
                self.timings[rest.split(" ")[0]] = float(rest.split(" ")[1])
            finished = finished or kind == "D"
        if self.truncated:
            self.notes.append(f"output beyond {self.cfg['max_output_kb']} KiB was not read (the stream was closed)")
        if not finished and not self.timed_out:
            self.notes.append("the judge did not finish (killed or crashed)")
        self.timings["replied"] = time.monotonic()
        return {
            "passed": passed,
            "timed_out": self.timed_out,
            "error": self.error,
            "exit_code": os.waitstatus_to_exitcode(status),
            "sandboxed": self.isolate,
            "output_tail": self.output.decode("utf-8", "replace"),
            "notes": self.notes,
            "timings": self.timings,
        }


def supervise(conn: int, server_pid: int) -> None:
    """The forked child of the server for one request on socket ``conn``; never returns."""
    code = 1
    try:
        set_name(b"sandbox-super")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # this process stays root, so the setting holds
        if os.getppid() != server_pid:
            os._exit(1)
        started = time.monotonic()
        cfg = recv_frame(conn, limit=1 << 20)
        try:
            reply = Supervisor(conn, cfg, started).run()
        except Exception as exc:
            reply = {"error": f"sandbox setup failed: {type(exc).__name__}: {exc}"}
        send_frame(conn, reply)
        code = 0
    except BaseException:  # noqa: B036 - the caller sees a closed socket and reports it
        pass
    finally:
        os._exit(code)


# ------------------------------------------------------------------------------------------ server and probe


def serve(control_fd: int) -> None:
    """Fork one supervisor per request (a socket passed over the control socket); exit when the caller hangs up."""
    control = socket.socket(fileno=control_fd)
    server_pid = os.getpid()
    set_name(b"sandbox-server")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    _libc()
    gc.collect()
    gc.freeze()  # fewer copy-on-write faults in each fork
    control.send(b"ready")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError:
            break
        if not message:
            break
        if not fds:
            continue
        try:
            child = os.fork()
        except OSError:  # out of processes or memory: the caller sees its socket close and reports it
            child = -1
        if child == 0:
            control.close()
            supervise(fds[0], server_pid)
        for fd in fds:
            os.close(fd)
    _wait_for_supervisors()


def _wait_for_supervisors() -> None:
    # Let running supervisors finish (a discarded one cleans up in milliseconds) before this process's exit
    # kills them through their parent-death signal. With SIGCHLD ignored, wait() returns once all are gone.
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass


def probe() -> int:
    """Exit status 0 when this process may create the sandbox's namespaces and mounts."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_namespaces(1)
            inner = os.fork()
            if inner == 0:
                try:
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    os._exit(0)
                finally:
                    os._exit(1)
            os._exit(os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]))
        except BaseException:  # noqa: B036
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def probe_user_namespace() -> int:
    """Exit status 0 when a child can enter a user namespace mapped by this process and become nobody in it."""
    sync, child_sync = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    pid = os.fork()
    if pid == 0:
        try:
            own_user_namespace(child_sync)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            os._exit(0)
        except BaseException:  # noqa: B036
            os._exit(1)
    try:
        map_user_namespace(pid, sync)
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def main(argv: list[str]) -> int:
    """``serve FD``, ``probe`` or ``probe-userns``."""
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(int(argv[1]))
        return 0
    if argv == ["probe"]:
        return probe()
    if argv == ["probe-userns"]:
        return probe_user_namespace()
    print("usage: sandbox_runtime.py serve FD | probe | probe-userns", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
