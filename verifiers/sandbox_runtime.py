"""The process side of :mod:`verifiers.sandbox`: standard library only, run as ``python -I -S <this file> serve FD``.

Process tree (every arrow is a plain ``fork``, no ``exec``: the interpreter is already warm, see :func:`warm_up`)::

    fork server (root, host namespaces, clean env; never reads a payload)
      └─ supervisor, one per session (root, host namespaces, the session's cgroups): forks each check's judge,
         times it, reaps it
           └─ judge = PID 1 of a new PID namespace, in the session's cgroups (unshares net/mount/IPC/cgroup,
              pivots into the jail: a tmpfs root with the standard library read-only, its own /tmp, /dev,
              /proc; then nobody, non-dumpable, signals blocked)
                └─ candidate (nobody, then its own user namespace without capabilities, no_new_privs): loads
                   the completion, then answers calls to its top-level names

A session (one :func:`~verifiers.sandbox.run_tests` call, or one worker of a batch) runs its checks one
after another, each in a fresh :class:`Sandbox`, set up ahead while the previous check runs. The caller
writes the tests and the code into the sandbox's pipes and reads the verdicts and the output from them:
no payload, verdict or output ever exists in the supervisor's memory, from which the next sandboxes fork.
Each payload is length-prefixed (:func:`write_payload`) and read to exactly its length, never to EOF: a copy
of a write end that outlives the caller's close (in a child the caller forked, as ``fork`` ignores
close-on-exec) cannot stall the judge or the candidate.

The judge alone holds the verdict pipe; the candidate holds only its RPC socket, its output pipe and
(while loading) its code pipe. The judge runs the tests with a :class:`Proxy` for each candidate name;
arguments and results cross as plain data (:func:`encode` / :func:`decode`), rebuilt as exact builtin
types, so nothing the candidate defines (an ``__eq__`` that is always true, a patched ``exec``) ever
runs in the judge. The judge reads the tests only after it forked the candidate, from a pipe the candidate
closes before it runs any of the completion's code, so the expected values never exist in its memory.

The jail's contents are planned once per server (:func:`jail_plan`, inherited by every fork) and built by each
judge (:func:`enter_jail`); the cgroups are made and joined by each supervisor before it forks its first judge
(:func:`enter_session_cgroups`), so every process of its sandboxes is born in them; the sandboxes take turns in
two memory slots, so a check never shares its memory budget with the sandbox set up ahead of it.

As PID 1 the judge cannot be signalled from inside its namespace, and when it exits (or the supervisor
kills it at the wall timeout) the kernel kills every process left in the namespace before the
supervisor's ``waitpid`` returns: nothing outlives a check (pid_namespaces(7)). Needs Linux 5.3 (pidfd).
"""

from __future__ import annotations

import _signal  # signal.py's C half: see lean_signal
import _socket
import array
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
PAYLOAD_HEADER_BYTES = 8  # the length in front of each payload (tests, code): see write_payload
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")

# <sched.h>, <sys/mount.h>, <sys/prctl.h>
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
CLONE_NEWUSER, CLONE_NEWCGROUP = 0x10000000, 0x02000000
# The judge's own (CLONE_NEWPID is set by its parent); the cgroup namespace, made once the judge joined its
# cgroups, shows them as "/" in /proc/self/cgroup instead of the host's paths.
NAMESPACES = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 1, 32, 4096, 2
# pivot_root(2) has no libc wrapper: its syscall number per machine
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}
JAIL_DEVICES = {"null": (1, 3), "zero": (1, 5), "random": (1, 8), "urandom": (1, 9)}  # <linux/major.h> MEM_MAJOR
JAIL_STAGING = ("/tmp", "/mnt", "/srv", "/opt")  # an existing directory the jail's root is built on, then pivoted to
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = 1, 4, 15, 38
# What a candidate's own user namespace may hold (/proc/sys/user, see limit_user_namespace): no namespace of any
# kind, and of the kernel objects counted per uid, a few inotify instances for a program that watches its files.
USER_NAMESPACE_LIMITS = {
    **{f"max_{kind}_namespaces": 0 for kind in ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")},
    "max_inotify_instances": 8,
    "max_inotify_watches": 1024,
    "max_fanotify_groups": 0,
    "max_fanotify_marks": 0,
}
SIGNALS_PENDING = 64  # RLIMIT_SIGPENDING: queued signals of one sandbox
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# Per machine: the AUDIT_ARCH of its native ABI, the numbers of the calls refused (memfd_create, execve,
# execveat), and the bit that marks another syscall table on the same arch (x32), or 0 (<linux/audit.h>,
# the kernel's syscall tables).
SECCOMP_SYSCALLS = {
    "x86_64": (0xC000003E, (319, 59, 322), 0x40000000),
    "aarch64": (0xC00000B7, (279, 221, 281), 0),
}

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
_jail_plan: dict | None = None  # what each sandbox's root holds: computed once by the server, inherited by every fork
RUNTIME_FILE = os.path.abspath(__file__)
_cgroup_plan: dict | None = None  # where each sandbox's cgroups are made (see cgroup_plan), inherited likewise
CGROUP_PREFIX = "grpoflow-sandbox-"
CPU_PERIOD_US = 100_000  # the period of a session's CPU quota (the kernel's default)


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


def write_payload(fd: int, data: bytes) -> None:
    """One payload (a check's tests or code) with its length in front, for :func:`read_payload`."""
    write_all(fd, len(data).to_bytes(PAYLOAD_HEADER_BYTES, "big") + data)


def read_payload(fd: int) -> bytes:
    """One payload from :func:`write_payload`: exactly its length, so that the end of the data is known without
    EOF, which never comes while any copy of the write end is open anywhere."""
    return read_exact(fd, int.from_bytes(read_exact(fd, PAYLOAD_HEADER_BYTES), "big"))


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


def lean_signal(signum: int, handler: int) -> None:
    """``signal.signal`` for SIG_DFL / SIG_IGN without signal.py's conversions to and from enums.

    In a freshly forked process every Python object touched costs a copy of its page (its reference count is
    written), and an enum lookup touches many: the sandbox's processes use the C functions directly.
    """
    _signal.signal(signum, handler)


def fd_pair() -> tuple[int, int]:
    """A connected pair of AF_UNIX stream sockets as plain fds (close-on-exec), without Python socket objects."""
    one, two = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    return one.detach(), two.detach()


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
    """Unshare network, mount and IPC namespaces; a private tmpfs on each world-writable directory.

    Called by the judge, which is already PID 1 of a new PID namespace (see :func:`fork_in_new_pid_namespace`).
    The directories are those of :data:`WRITABLE_DIRS` that exist now, looked up for each sandbox (a few
    stat calls), so one that appears while a session runs is covered from its next sandbox on.
    """
    writable_dirs = existing_writable_dirs()
    _check_call(_libc().unshare(NAMESPACES), "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
    for path in writable_dirs:
        _private_tmpfs(path, tmpfs_mb)


def _private_tmpfs(target: str, tmpfs_mb: int) -> None:
    """A writable tmpfs of its own on ``target`` (anyone may write, sticky), from which nothing runs:
    noexec, so a program the code writes there is refused by execve and PROT_EXEC mappings."""
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={tmpfs_mb}m,mode=1777")


def existing_writable_dirs() -> list[str]:
    """The world-writable directories of this machine that each sandbox covers with its own tmpfs."""
    return [path for path in WRITABLE_DIRS if os.path.isdir(path)]


# ---------------------------------------------------------------------------------------------------- jail


def jail_plan() -> dict:
    """What each sandbox's root holds besides its own /tmp, /dev and /proc, looked up once (by the server).

    Read-only binds, each at its host path: the standard library (``os``'s directory, lib-dynload included),
    every directory the shared libraries of the standard library's extension modules come from (found by
    :func:`library_dirs`: libc's, libcrypto's, libffi's..., no other host directory), and the loader's cache.
    Every ``site-packages`` / ``dist-packages`` under a bound directory is masked by an empty read-only tmpfs,
    and top-level symlinks such as a merged-/usr ``/lib -> usr/lib`` are recreated, so library paths resolve.
    """
    stdlib = os.path.abspath(os.path.dirname(os.__file__))  # where this interpreter's sys.path looks
    dirs: list[str] = []
    for path in sorted({stdlib, *library_dirs()}, key=len):
        if not any(path == d or path.startswith(d + "/") for d in dirs):
            dirs.append(path)
    masks = sorted(
        os.path.join(d, *sub, name)
        for d in dirs
        for sub in ([], *([entry] for entry in _listdir(d) if entry.startswith("python")))
        for name in ("site-packages", "dist-packages")
        if os.path.isdir(os.path.join(d, *sub, name))
    )
    files = [path for path in ("/etc/ld.so.cache",) if os.path.isfile(path)]
    links = [(path, os.readlink(path)) for path in ("/lib", "/lib32", "/lib64", "/libx32") if os.path.islink(path)]
    staging = next(path for path in JAIL_STAGING if os.path.isdir(path) and not os.path.islink(path))
    return {"dirs": dirs, "files": files, "masks": masks, "links": links, "staging": staging}


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def library_dirs() -> list[str]:
    """The directories of the shared objects that this interpreter and its extension modules load.

    Found by a scout: a forked child loads every extension module of lib-dynload with ``dlopen`` (the
    libraries they link, not their Python code) and reports the directories of the files in its memory map,
    so the server itself maps nothing new. A module whose library is missing fails its import, as on the host.
    """
    dynload = next((path for path in sys.path if os.path.basename(path) == "lib-dynload"), "")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            for name in sorted(_listdir(dynload)):
                if name.endswith(".so"):
                    try:
                        ctypes.CDLL(os.path.join(dynload, name), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
                    except OSError:
                        pass
            write_all(write, json.dumps(_mapped_library_dirs()).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        found = json.loads(read_all(read) or b"[]")
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    if not found:
        raise OSError("the library scout found no shared libraries")
    return [str(path) for path in found]


def _mapped_library_dirs() -> list[str]:
    dirs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)  # address, perms, offset, device, inode, path (absent for anonymous maps)
            path = fields[5].strip() if len(fields) == 6 else ""
            if path.startswith("/") and ".so" in os.path.basename(path) and os.path.isfile(path):
                dirs.add(os.path.dirname(os.path.realpath(path)))
    return sorted(dirs)


def enter_jail(plan: dict, tmpfs_mb: int) -> None:
    """Unshare network, mount and IPC namespaces and make the root a fresh tmpfs that holds only ``plan``.

    Built on a tmpfs mounted over the staging directory (in this mount namespace only), then made the root by
    pivot_root(2) (``pivot_root(".", ".")``, then the old root detached): nothing of the host's filesystem is
    reachable afterwards, neither files nor path sockets, except the read-only binds. Its own: /tmp (the
    working directory) and /dev/shm, private tmpfs of ``tmpfs_mb``; /dev with null, zero, random and urandom
    only; /proc of the new PID namespace. The root is read-only; the judge (PID 1 there) calls it.
    """
    _check_call(_libc().unshare(NAMESPACES), "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
    os.umask(0o022)
    root = plan["staging"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    for path in plan["dirs"]:
        os.makedirs(root + path, exist_ok=True)
        _bind_read_only(path, root + path)
    for path in plan["files"]:
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.close(os.open(root + path, os.O_CREAT | os.O_WRONLY, 0o644))
        _bind_read_only(path, root + path)
    for path in plan["masks"]:
        mount("tmpfs", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
    for path, target in plan["links"]:
        if not os.path.lexists(root + path):  # a bound directory may already have taken the name
            os.symlink(target, root + path)
    _private_dirs(root, tmpfs_mb)
    os.chdir(root)
    _check_call(_libc().syscall(_PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    _check_call(_libc().umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")
    mount("none", "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _bind_read_only(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND)
    mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _private_dirs(root: str, tmpfs_mb: int) -> None:
    """The jail's writable /tmp and /dev/shm, its /dev (device nodes made here: no host file is bound), /proc."""
    for path in ("/tmp", "/dev", "/proc"):
        os.mkdir(root + path)
    _private_tmpfs(root + "/tmp", tmpfs_mb)
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=755")
    for name, (major, minor) in JAIL_DEVICES.items():
        os.mknod(f"{root}/dev/{name}", 0o666 | 0o020000, os.makedev(major, minor))  # S_IFCHR
        os.chmod(f"{root}/dev/{name}", 0o666)  # the umask took write from group and others
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.mkdir(root + "/dev/shm")
    _private_tmpfs(root + "/dev/shm", tmpfs_mb)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this PID namespace's processes


# ------------------------------------------------------------------------------------------------- cgroups


def cgroup_plan() -> dict | None:
    """Where each sandbox's cgroups are made: ``{"version": 2 or 1, "parents": {controller: directory}, "cpu":
    whether the CPU is bounded}``, children of this process's own cgroups, or None where none can be made here
    (no write access, no controller).

    cgroup v2 where its ``memory`` and ``pids`` controllers are enabled for children of this process's cgroup,
    else the v1 ``memory`` hierarchy (and ``pids`` and ``cpu``, where mounted). The CPU bound is taken where the
    ``cpu`` controller is there too, and left out (the memory bound kept) where it is not. A child directory is
    made and removed here to prove it; what a session's supervisor left behind when killed is removed too.
    """
    found = _cgroup_hierarchies()
    if found is None:
        return None
    no_cpu = {**found, "parents": {c: d for c, d in found["parents"].items() if c != "cpu"}, "cpu": False}
    for plan in [found, no_cpu] if found["cpu"] else [found]:
        try:
            probe_name = f"{CGROUP_PREFIX}{os.getpid()}-probe"
            remove_cgroups(make_cgroups(plan, {"total_memory_mb": 64, "max_processes": 1, "cpus": 1.0}, probe_name))
        except OSError:
            continue
        _remove_stale_cgroups(plan)
        return plan
    return None


def _cgroup_hierarchies() -> dict | None:
    """The plan :func:`cgroup_plan` tries first, from this process's mounts and cgroups, before any is made."""
    mounts = _cgroup_mounts()
    own = _own_cgroups()
    v2 = _cgroup_dir(mounts.get("cgroup2"), own.get(""))
    enabled = set(_read_text(os.path.join(v2, "cgroup.subtree_control")).split()) if v2 else set()
    if v2 and {"memory", "pids"} <= enabled:
        return {"version": 2, "parents": {"": v2}, "cpu": "cpu" in enabled}
    parents = {c: d for c in ("memory", "pids", "cpu") if (d := _cgroup_dir(mounts.get(c), own.get(c)))}
    return {"version": 1, "parents": parents, "cpu": "cpu" in parents} if "memory" in parents else None


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """``{"cgroup2" or a v1 controller: (mount root, mount point)}`` from this process's mountinfo."""
    found: dict[str, tuple[str, str]] = {}
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields, _, rest = line.partition(" - ")
            parts, extra = fields.split(), rest.split()
            if len(parts) < 5 or len(extra) < 3:
                continue
            where = (parts[3], parts[4])
            if extra[0] == "cgroup2":
                found.setdefault("cgroup2", where)
            elif extra[0] == "cgroup":
                for option in extra[2].split(","):
                    found.setdefault(option, where)
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and ``""`` for v2 (/proc/self/cgroup)."""
    own = {}
    with open("/proc/self/cgroup") as info:
        for line in info:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                own[controller] = path
    return own


def _cgroup_dir(mount_entry: tuple[str, str] | None, path: str | None) -> str | None:
    """The directory of cgroup ``path`` in a hierarchy mounted at ``mount_entry``, if that mount shows it."""
    if mount_entry is None or path is None:
        return None
    root, point = mount_entry
    if root != "/" and path != root and not path.startswith(root + "/"):
        return None
    directory = point + (path[len(root) :] if root != "/" else path).rstrip("/")
    return directory if os.path.isdir(directory) else None


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write_text(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


SLOTS = ("a", "b")  # a session's two memory budgets: the running check's, and the sandbox's set up ahead


def make_cgroups(plan: dict, cfg: dict, name: str) -> list[str]:
    """A session's cgroups (a directory per hierarchy), limited to ``max_processes`` plus four: the supervisor,
    the running check's judge, and the judge and candidate of the sandbox set up ahead (the running candidate is
    among ``max_processes``, as it is for RLIMIT_NPROC), and to ``cpus`` of CPU time per second of wall time;
    and under the memory one, a cgroup per slot (:data:`SLOTS`), each limited to ``total_memory_mb`` without
    swap. Returned in the order made: the session's directories, then the slots (see :func:`slot_dirs`).

    The sandboxes of a session take turns in the slots, so the check that runs never shares its memory budget
    with the one set up ahead of it: a check that fills its budget makes the OOM killer choose among its own
    processes, never the next check's idle judge (a hostile check once killed it, failing an honest one).

    The CPU bound and the cgroup's own weight (the default, equal for every session) make a check's share of the
    machine the same whatever runs beside it: 30 spinning processes in one check get one share, not 30 of them.
    """
    memory = str(int(cfg["total_memory_mb"]) * 1024 * 1024)
    pids = str(int(cfg["max_processes"]) + 4)
    quota = str(max(1000, int(float(cfg["cpus"]) * CPU_PERIOD_US)))  # the kernel's smallest quota is 1 ms
    session = {  # in order: v1 refuses a quota set before its period
        2: [("pids.max", pids), ("cpu.max", f"{quota} {CPU_PERIOD_US}"), ("cgroup.subtree_control", "+memory")],
        1: [("pids.max", pids), ("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", quota)],
    }[plan["version"]]
    slot = {  # v1 refuses a memsw limit below the memory limit
        2: [("memory.max", memory), ("memory.swap.max", "0")],
        1: [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)],
    }[plan["version"]]
    cpu = plan["cpu"] and cfg.get("cpu_bound", True)
    session = [(file, value) for file, value in session if cpu or not file.startswith("cpu.")]
    made: list[str] = []
    try:
        made += [_cgroup(os.path.join(parent, name), session) for parent in plan["parents"].values()]
        for controller, parent in plan["parents"].items():
            if controller in ("", "memory"):  # v2's one hierarchy, or v1's memory one
                made += [_cgroup(os.path.join(parent, name, s), slot) for s in SLOTS]
    except OSError:
        remove_cgroups(made)
        raise
    return made


def _cgroup(path: str, limits: list[tuple[str, str]]) -> str:
    """Make the cgroup ``path`` and write each of ``limits`` that its controllers offer."""
    os.mkdir(path)
    for file, value in limits:
        if os.path.exists(os.path.join(path, file)):  # memsw needs swap accounting; pids only its own
            _write_text(os.path.join(path, file), value)
    return path


def slot_dirs(paths: list[str], slot: int) -> list[str]:
    """The directories a process joins to be in slot ``slot`` of the session :func:`make_cgroups` made as
    ``paths``: that slot's memory cgroup, and every session directory that has no slots (v1's pids and cpu)."""
    name = SLOTS[slot]
    slotted = {os.path.dirname(p) for p in paths if os.path.basename(p) in SLOTS}
    return [p for p in paths if os.path.basename(p) == name] + [
        p for p in paths if p not in slotted and os.path.basename(p) not in SLOTS
    ]


def join_cgroups(paths: list[str]) -> None:
    """Move this process into each cgroup ("0": the writer itself, whatever its PID namespace)."""
    for path in paths:
        _write_text(os.path.join(path, "cgroup.procs"), "0")


def remove_cgroups(paths: list[str], attempts: int = 100) -> list[str]:
    """Remove the (now empty) cgroups; the ones the kernel still holds busy after ``attempts`` tries are returned.

    The judge's processes are all reaped by then, but the kernel may take a moment to let go of exited tasks.
    """
    left = []
    for path in reversed(paths):
        for attempt in range(attempts):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                if attempt + 1 == attempts:
                    left.append(path)
                else:
                    time.sleep(0.001)
    return left


def _remove_stale_cgroups(plan: dict) -> None:
    """The cgroups of sandbox servers that are gone (named ``<prefix><server pid>-...``): a killed supervisor
    cannot remove its own."""
    for parent in plan["parents"].values():
        for entry in _listdir(parent):
            owner = entry[len(CGROUP_PREFIX) :].split("-")[0]
            if entry.startswith(CGROUP_PREFIX) and owner.isdigit() and not _alive(int(owner)):
                session = os.path.join(parent, entry)
                slots = [os.path.join(session, s) for s in SLOTS if os.path.isdir(os.path.join(session, s))]
                remove_cgroups([session, *slots], attempts=1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def fork_in_new_pid_namespace(own_pid_namespace: int) -> int:
    """``os.fork`` whose child is PID 1 of a new PID namespace; this process's own namespaces stay as they were.

    unshare(CLONE_NEWPID) changes only the namespace of the caller's next children, and only once: setns back
    to its own PID namespace (``own_pid_namespace``, an fd of /proc/self/ns/pid) re-arms it for the next fork,
    so one long-lived process can create any number of sandboxes (pid_namespaces(7), setns(2)).
    """
    _check_call(_libc().unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    try:
        pid = os.fork()
    except BaseException:
        _restore_pid_namespace(own_pid_namespace)
        raise
    if pid:
        try:
            _restore_pid_namespace(own_pid_namespace)
        except OSError:  # a next fork would land in this child's namespace: give both up
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
    return pid


def _restore_pid_namespace(own_pid_namespace: int) -> None:
    _check_call(_libc().setns(own_pid_namespace, CLONE_NEWPID), "setns(CLONE_NEWPID)")


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
        # Counted per uid across the machine, like NPROC: bounded here so that no check uses up nobody's share.
        (resource.RLIMIT_SIGPENDING, SIGNALS_PENDING),
        (resource.RLIMIT_MSGQUEUE, 0),
    )
    for limit, value in limits:
        resource.setrlimit(limit, (value, value))
    become_nobody()
    os.chdir(workdir)
    # Exactly PATH and HOME. Not os.environ.clear(): it ends in a KeyError it catches, which in a fresh fork
    # costs a copy of every page the exception machinery touches (the server's environment is PATH alone).
    for key in [key for key in os.environ if key not in ("PATH", "HOME")]:
        del os.environ[key]
    os.environ["PATH"] = "/usr/bin:/bin"
    os.environ["HOME"] = workdir


def become_nobody() -> None:
    """Switch every uid and gid to nobody, with no supplementary group, when still root (this clears every
    capability); a process that is nobody already keeps what it is."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)


# ----------------------------------------------------------------------------------------------- candidate


def candidate_main(fds: dict[str, int], cfg: dict, workdir: str) -> None:
    """Load the completion as nobody, announce its names, then answer the judge's calls until it hangs up."""
    set_name(b"sandbox-code")
    lean_signal(_signal.SIGCHLD, _signal.SIG_DFL)  # the judge ignores it; the completion may wait for children
    null = os.open(os.devnull, os.O_RDWR)
    arrange_fds(
        {0: null, 1: fds["out_w"], 2: fds["out_w"], 3: fds["rpc_candidate"], 4: fds["code_r"], 5: fds["sync_candidate"]}
    )
    if cfg["isolate"] and cfg.get("userns"):
        own_user_namespace(sync=5)
    os.close(5)
    drop_privileges(cfg, workdir)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary or file capability raises it again
    refuse_syscalls()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it (prctl(2)); matters without a PID ns
    code = read_payload(4).decode("utf-8", "surrogatepass")
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


def refuse_syscalls() -> None:
    """A seccomp filter (seccomp(2), SECCOMP_MODE_FILTER) that makes ``memfd_create``, ``execve`` and
    ``execveat`` fail with EPERM, and every system call of another ABI (i386's ``int 0x80``, x32) too, so
    that no number escapes the filter.

    A memfd is memory that no rlimit counts: written or truncated up to ``max_file_mb``, mapped, touched and
    unmapped, it stays held by a descriptor, ``max_open_files`` of them per process. Where no cgroup bounds the
    check, two processes held 1 GB that way under a 512 MB address-space limit. Nothing in the standard library
    needs one (shared memory goes through /dev/shm, a tmpfs of ``tmpfs_mb``).

    No program runs in the jail: a check forks, it never executes one, and the read-only binds of the
    interpreter's libraries must stay executable for ``import`` to map extension modules, so the dynamic
    loader among them (``ld-linux-x86-64.so.2 --version`` ran there, and could run ``libc.so.6``) is refused
    at the call, not by the mount. Needs no_new_privs; on a machine whose numbers are not in
    :data:`SECCOMP_SYSCALLS` no filter is installed.
    """
    known = SECCOMP_SYSCALLS.get(os.uname().machine)
    if known is None:
        return
    audit_arch, refused, other_abi = known
    # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}; jumps count the instructions skipped.
    ld_arch, ld_nr, ret_allow, ret_eperm = (
        (0x20, 0, 0, 4),
        (0x20, 0, 0, 0),
        (0x06, 0, 0, 0x7FFF0000),
        (0x06, 0, 0, 0x50001),
    )
    checks = [(0x35, 1, 0, other_abi)] if other_abi else []  # JGE: the x32 syscalls carry a high bit
    checks += [(0x15, 1, 0, number) for number in refused]  # JEQ
    program = [ld_arch, (0x15, 0, len(checks) + 2, audit_arch), ld_nr]  # a foreign arch jumps to the refusal
    program += [(code, len(checks) - i, jf, k) for i, (code, _, jf, k) in enumerate(checks)]
    program += [ret_allow, ret_eperm]
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    fprog = _SockFprog(len(program), ctypes.cast(filters, ctypes.c_void_p))
    _check_call(_libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.c_void_p)]


def own_user_namespace(sync: int) -> None:
    """Become nobody, then enter a user namespace of its own, mapped by the judge, so that RLIMIT_NPROC counts
    this sandbox only.

    The kernel counts a uid's processes per user namespace and charges each count to the namespace's creator one
    level up (user_namespaces(7), kernel/ucount.c). Without a namespace of its own, a fork bomb in one sandbox
    would make ``fork`` fail in every sandbox beside it. Made by root, the namespace would charge host root
    with every inotify instance, fanotify group, namespace, queued signal and message queue of the check: 128
    inotify instances would leave every root process on the machine without one. Made by nobody, it charges
    nobody, and the limits below bound what one check may take even of that. Only nobody is mapped, to itself,
    so that no uid inside can act as host root on a file. The creator holds every capability in its new
    namespace: they serve to write its limits, then are all dropped. Where the kernel refuses (user namespaces
    disabled), the process count stays shared by all of nobody's processes.
    """
    become_nobody()
    entered = _libc().unshare(CLONE_NEWUSER) == 0
    os.write(sync, b"u" if entered else b"n")
    if os.read(sync, 1) != b"k":
        raise OSError("the judge did not map the candidate's user namespace")
    if entered:
        limit_user_namespace()
        drop_capabilities()


def limit_user_namespace() -> None:
    """Lower this user namespace's own counts (/proc/sys/user, writable by whoever holds CAP_SYS_RESOURCE in it):
    no namespace of any kind, a few inotify instances, no fanotify group. Best effort: a kernel without one
    of these counts has nothing of it to bound, and nobody owns the namespace either way."""
    for name, value in USER_NAMESPACE_LIMITS.items():
        try:
            _write_text(f"/proc/sys/user/{name}", str(value))
        except OSError:
            continue


def drop_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (capset(2), _LINUX_CAPABILITY_VERSION_3): the process
    keeps nothing of what it held as its namespace's creator, and cannot take it back."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all zero
    _check_call(_libc().capset(header, data), "capset")


def map_user_namespace(pid: int, sync: int) -> None:
    """The judge's half of :func:`own_user_namespace`: write the child's uid and gid maps (needs root)."""
    if os.read(sync, 1) == b"u":
        for name in ("uid_map", "gid_map"):
            fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
            try:
                os.write(fd, f"{NOBODY} {NOBODY} 1\n".encode())
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


# Exceptions that Python's own machinery catches as a signal rather than an error: a StopIteration raised by a
# call inside ``map``/``filter``/``zip`` ends that iteration quietly, so ``all(map(f, xs))`` would hold for an
# ``f`` that only raises. The candidate's are re-raised as CandidateError, which nothing catches implicitly.
_CONTROL_FLOW_EXCEPTIONS = (StopIteration, StopAsyncIteration)


def _candidate_exception(type_name: Any, message: Any) -> Exception:
    """The builtin exception the candidate raised (so tests that expect e.g. ValueError work), else CandidateError:
    for a non-builtin type, a BaseException that is no Exception (SystemExit, KeyboardInterrupt, GeneratorExit)
    and the iteration protocol's signals (:data:`_CONTROL_FLOW_EXCEPTIONS`), so that whatever the candidate
    raises fails the test that called it unless the test catches that very type itself."""
    cls = getattr(builtins, type_name, None) if type(type_name) is str else None
    text = str(message)[:500]
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, _CONTROL_FLOW_EXCEPTIONS):
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


def judge_main(fds: dict[str, int], cfg: dict, workdir: str, supervisor: int) -> None:
    """PID 1 of the sandbox: make its namespaces, start the candidate, drop to nobody, wait for the tests (the
    sandbox is set up ahead of its payload), run them, write the verdicts."""
    try:
        _start_judge(fds, cfg, workdir, supervisor)
    except Exception as exc:  # a setup failure is the sandbox's, not the completion's: say so
        _report(fds["verdict_w"], f"E {type(exc).__name__}: {exc}"[:300])
        os._exit(1)
    _report(4, f"T ready {time.monotonic()}")
    payload = json.loads(read_payload(3))
    os.close(3)
    run_judge(payload["tests"], Channel(5), verdicts=4, setup=payload.get("setup", ""))


def limit_ipc(tmpfs_mb: int) -> None:
    """Bound the SysV IPC of the check's own IPC namespace, which no rlimit counts and which lives on after its
    creator detached: shared memory to ``tmpfs_mb`` in all (as /dev/shm), message queues to a few of 16 KiB."""
    size = tmpfs_mb * 1024 * 1024
    for name, value in (("shmmax", size), ("shmall", size // os.sysconf("SC_PAGE_SIZE")), ("msgmni", 8)):
        _write_text(f"/proc/sys/kernel/{name}", str(value))


def _start_judge(fds: dict[str, int], cfg: dict, workdir: str, supervisor: int) -> None:
    set_name(b"sandbox-judge")
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if _host_parent() != supervisor:  # it died before the line above: nobody would ever stop this sandbox
        os._exit(1)
    if cfg["isolate"] and cfg.get("cgroup"):
        # The OOM killer's first choice, with everything it forks, before the supervisor in the same cgroup
        # (raising one's own score needs no privilege; lowering the supervisor's would need CAP_SYS_RESOURCE).
        _write_text("/proc/self/oom_score_adj", "1000")
    if cfg["isolate"] and cfg.get("jail"):
        if _jail_plan is None:
            raise OSError("the sandbox server has no jail plan (see its probe)")
        enter_jail(_jail_plan, int(cfg["tmpfs_mb"]))
        limit_ipc(int(cfg["tmpfs_mb"]))
        _report(fds["verdict_w"], f"T namespaces {time.monotonic()}")
    elif cfg["isolate"]:
        enter_namespaces(int(cfg["tmpfs_mb"]))
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this namespace's processes only
        limit_ipc(int(cfg["tmpfs_mb"]))
        _report(fds["verdict_w"], f"T namespaces {time.monotonic()}")
    else:
        os.setpgid(0, 0)  # without a PID namespace, the supervisor kills this process group instead
    lean_signal(_signal.SIGCHLD, _signal.SIG_IGN)  # as init, reap every orphan at once (zombies count for NPROC)
    sync, fds["sync_candidate"] = fd_pair()
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
    lean_signal(_signal.SIGINT, _signal.SIG_DFL)  # an init gets no signal from its namespace unless it handles it
    drop_privileges(cfg, workdir)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_DUMPABLE, 0)  # /proc/1/{fd,mem} root-owned, no ptrace: the candidate shares the uid
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the uid change cleared it
    _signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals())


def _host_parent() -> int:
    """The parent's pid as the host sees it (getppid() is 0 for the init of a new PID namespace), read from the
    host's /proc, which is still mounted here."""
    fd = os.open("/proc/self/stat", os.O_RDONLY)
    try:
        return int(os.read(fd, 4096).rpartition(b")")[2].split()[1])
    finally:
        os.close(fd)


def run_judge(tests: list[str], channel: Channel, verdicts: int, setup: str = "") -> None:
    """Wait for the candidate to load, then run each test in one scope and report ``P i`` or ``F i Type``.

    ``setup`` is trusted code (a HumanEval prompt's imports and helper functions) run in the test scope before
    the tests: its names replace the candidate's, so the tests call the row's own helpers, whatever the
    completion redefined. When it fails, every test fails.
    """
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
    scope = build_scope(hello[1], [*tests, setup], channel)
    try:
        exec(compile(setup, "<setup>", "exec"), scope)
    except BaseException as exc:  # noqa: B036 - the row's own code failed: no test can count
        _report(verdicts, f"N the tests' setup failed: {type(exc).__name__}")
        _report(verdicts, "D")
        os._exit(0)
    for i, test in enumerate(tests):
        try:
            exec(compile(test, f"<test {i}>", "exec"), scope)
            line = f"P {i}"
        except BaseException as exc:  # noqa: B036 - any exception fails this test only
            line = f"F {i} {type(exc).__name__}"
        _report(verdicts, line)
    if channel.broken:  # e.g. the CPU rlimit or the memory limit killed the completion's process mid-test
        _report(verdicts, f"N {_printable(channel.broken)}")
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


class Sandbox:
    """One check's processes, set up ahead of its payload by a session's supervisor (root, host namespaces).

    The judge is forked as PID 1 of a new PID namespace and makes its other namespaces and the candidate
    itself. The supervisor only times and reaps it: the caller gets the ends of the pipes (tests and code in,
    verdicts and output out), so no payload, verdict or output ever passes through the supervisor's memory,
    from which every later sandbox of the session is forked.
    """

    def __init__(self, cfg: dict, pid_namespace: int | None) -> None:
        self.cfg = cfg
        self.isolate = bool(cfg["isolate"])
        self.timings = {"started": time.monotonic()}
        self.judge = 0
        self.pidfd = -1
        self.reaped = False
        self.timed_out = False
        self.deadline = 0.0
        self.workdir = "/tmp" if self.isolate else _host_workdir()  # /tmp: the judge's private tmpfs
        fds = _pipes()
        try:
            self.judge = self._fork_judge(fds, pid_namespace)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            self._remove_workdir()
            raise
        for key in ("verdict_w", "tests_r", "code_r", "out_w", "rpc_judge", "rpc_candidate"):
            os.close(fds[key])
        self.handles: list[int] = [fds["tests_w"], fds["code_w"], fds["verdict_r"], fds["out_r"]]
        self.timings["forked"] = time.monotonic()
        try:
            self.pidfd = os.pidfd_open(self.judge)  # readable once the judge exits (Linux 5.3)
        except OSError:
            self.discard()
            raise

    def _fork_judge(self, fds: dict[str, int], pid_namespace: int | None) -> int:
        supervisor = os.getpid()
        pid = fork_in_new_pid_namespace(pid_namespace) if pid_namespace is not None else os.fork()
        if pid == 0:
            try:
                judge_main(fds, self.cfg, self.workdir, supervisor)
            finally:
                os._exit(1)
        return pid

    def hand_over(self, conn: socket.socket) -> None:
        """Give the caller the pipes' ends (tests, code, verdicts, output); this process keeps no copy."""
        try:
            conn.sendmsg([b"r"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", self.handles))])
        finally:
            for fd in self.handles:
                os.close(fd)
            self.handles = []

    def start(self) -> None:
        """The payload is on its way: the wall-clock limit runs from now."""
        self.timings["go"] = time.monotonic()
        self.deadline = self.timings["go"] + float(self.cfg["wall_seconds"])

    def finish(self) -> dict:
        """Wait for the judge to end, or kill it at the deadline; reap it: no process of the sandbox is left."""
        try:
            if not self._ends_before(self.deadline):
                self.timed_out = True  # killing the judge (PID 1) ends the namespace and closes every pipe
                self._kill()
            elif not self.isolate:
                self._kill()  # the candidate and its process group (escaped sessions survive: no PID namespace)
            status = os.waitpid(self.judge, 0)[1]
            self.reaped = True
        finally:
            self.discard()
        self.timings["reaped"] = time.monotonic()
        return {"exit_code": os.waitstatus_to_exitcode(status), "timed_out": self.timed_out, "timings": self.timings}

    def _ends_before(self, deadline: float) -> bool:
        """Whether the judge exits before ``deadline``. As PID 1 it exits only once every process of its namespace
        is gone; unreaped, its pid cannot be reused, so killing it afterwards is safe."""
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            if poller.poll(left * 1000):
                return True
        return False

    def _kill(self) -> None:
        if self.reaped or self.judge <= 0:
            return  # the pid may belong to someone else by now
        for kill in (os.kill, os.killpg) if not self.isolate else (os.kill,):
            try:
                kill(self.judge, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def discard(self) -> None:
        """Kill and reap whatever is left (an unused sandbox, or one whose check failed) and drop its directory."""
        for fd in self.handles:
            os.close(fd)
        self.handles = []
        if not self.reaped:
            self._kill()
            os.waitpid(self.judge, 0)
            self.reaped = True
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        self._remove_workdir()

    def _remove_workdir(self) -> None:
        if not self.isolate:  # an isolated workdir is a tmpfs that vanishes with its mount namespace
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)


def enter_session_cgroups(cfg: dict) -> list[str]:
    """The session's cgroups, made and joined by its supervisor, when the session asked for them
    (``cfg["cgroup"]``), else none: every judge it forks, and all of that judge's processes, are born in them.

    One set per session rather than per check: moving a task between cgroups waits for an RCU grace period,
    which cost every check a millisecond or more of latency under load, while a fork lands in its parent's
    cgroup for free. The supervisor moves once per check, itself alone, into the other memory slot before it
    forks the next sandbox (:func:`run_session`): the running check's memory budget is its own, and the process
    budget the session's (:func:`make_cgroups`). Each judge makes itself and its processes the OOM killer's first
    choice, so a check that fills its budget loses its own processes, not the supervisor.
    """
    if not (cfg["isolate"] and cfg.get("cgroup")):
        return []
    if _cgroup_plan is None:
        raise OSError("the sandbox server found no cgroup it can make (see its probe)")
    paths = make_cgroups(_cgroup_plan, cfg, f"{CGROUP_PREFIX}{os.getppid()}-{os.getpid()}")
    try:
        join_cgroups(slot_dirs(paths, 0))
    except OSError:
        leave_session_cgroups(paths)
        raise
    return paths


def leave_session_cgroups(paths: list[str]) -> None:
    """Move the supervisor back to the cgroups it came from, then remove the session's (every judge is reaped)."""
    for path in paths:
        if os.path.basename(path) in SLOTS:
            continue  # its session's directory is the one whose parent the supervisor came from
        try:
            _write_text(os.path.join(os.path.dirname(path), "cgroup.procs"), "0")
        except OSError:
            pass  # then its directory stays busy until this process exits; the next server removes it
    remove_cgroups(paths)


def _pipes() -> dict[str, int]:
    fds = {}
    for name in ("verdict", "tests", "code", "out"):
        fds[f"{name}_r"], fds[f"{name}_w"] = os.pipe()
    fds["rpc_judge"], fds["rpc_candidate"] = fd_pair()
    return fds


def _host_workdir() -> str:
    import tempfile

    workdir = tempfile.mkdtemp(prefix="grpoflow-sandbox-")
    os.chmod(workdir, 0o777)
    return workdir


def run_session(conn: socket.socket, cfg: dict) -> None:
    """Run the caller's checks one at a time, each in a fresh :class:`Sandbox`; return when the caller hangs up.

    Messages on ``conn`` (a SOCK_SEQPACKET socket): this process sends ``r`` with the pipes of a sandbox that is
    ready (or a JSON ``{"error"}`` when none could be made); the caller answers ``g`` (go, the last check) or
    ``m`` (go, and more will follow: the next sandbox is set up at once, while this one runs) and writes the
    payload into the pipes; this process sends the JSON outcome once the judge is reaped.
    """
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if cfg["isolate"] else None
    cgroups = enter_session_cgroups(cfg)
    slot = 0  # the memory slot the supervisor is in, and so the next sandbox it forks (see make_cgroups)
    live: list[Sandbox] = []
    try:
        live.append(Sandbox(cfg, own))
        while live:
            sandbox = live[0]
            sandbox.hand_over(conn)
            go = _recv_message(conn)
            if go not in (b"g", b"m"):  # the caller hung up (the sandbox was set up ahead and is not needed)
                return
            sandbox.start()
            failure = ""
            if go == b"m":
                try:
                    if cgroups:  # the next sandbox is born in the other slot: its own memory budget
                        slot ^= 1  # (the session's pids and cpu cgroups hold the supervisor already)
                        join_cgroups([p for p in cgroups if os.path.basename(p) == SLOTS[slot]])
                    live.append(Sandbox(cfg, own))
                except Exception as exc:  # reported once this check is done, in place of the next sandbox
                    failure = f"sandbox setup failed: {type(exc).__name__}: {exc}"
            conn.send(json.dumps(sandbox.finish()).encode())
            live.pop(0)
            if failure:
                conn.send(json.dumps({"error": failure}).encode())
    finally:
        for sandbox in live:
            sandbox.discard()
        leave_session_cgroups(cgroups)


def _recv_message(conn: socket.socket) -> bytes:
    try:
        return conn.recv(1 << 16)
    except OSError:
        return b""


def supervise(conn: int, server_pid: int) -> None:
    """The forked child of the server for one session on socket ``conn``; never returns."""
    code = 1
    try:
        set_name(b"sandbox-super")
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # this process stays root, so the setting holds
        if os.getppid() != server_pid:
            os._exit(1)
        sock = socket.socket(fileno=conn)
        cfg = json.loads(_recv_message(sock))
        try:
            run_session(sock, cfg)
        except Exception as exc:
            sock.send(json.dumps({"error": f"sandbox setup failed: {type(exc).__name__}: {exc}"}).encode())
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
    global _jail_plan, _cgroup_plan
    try:
        _jail_plan = jail_plan()  # before SIGCHLD is ignored: the plan's scout is a child waited for
    except (OSError, StopIteration):  # sessions that ask for the jail then fail their setup and say why
        _jail_plan = None
    try:
        _cgroup_plan = cgroup_plan()
    except (OSError, ValueError):
        _cgroup_plan = None
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    _libc()
    warm_up()
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


def warm_up(rounds: int = 20) -> None:
    """Run here the plain-data path of a check, so that every fork inherits it warm.

    The first ``compile`` in a process builds the compiler's state, and CPython writes to a function's code
    object while it warms it up (call counters, then specialised bytecode): done in each fork, that cost a
    copy of every page touched, about a third of a check's CPU time. Done once in the fork server, it is not.
    """
    for _ in range(rounds):
        _rehearse_check()
        existing_writable_dirs()  # each judge looks them up before its namespaces


def _rehearse_check() -> None:
    """A check's plain-data path: the candidate loads code and answers, the judge builds its scope and runs tests."""
    judge_end, candidate_end = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    verdict_r, verdict_w = os.pipe()
    try:
        scope = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile("import math\ndef add(a, b):\n    return a + b\nN = 3", "<completion>", "exec"), scope)
        send_frame(candidate_end, ["loaded", describe(scope)])
        tests_json = json.dumps({"tests": ["assert add(1, 2) == N", "assert math.floor(add(0.5, 1)) == 1"]}).encode()
        write_payload(verdict_w, tests_json)  # the way a judge gets its tests (the pipe is free until the verdicts)
        tests = json.loads(read_payload(verdict_r))["tests"]
        channel = Channel(judge_end)
        send_frame(candidate_end, ["ok", 1, encode(3)])  # the answer to the value request build_scope makes
        test_scope = build_scope(recv_frame(judge_end)[1], tests, channel)
        answer(recv_frame(candidate_end), scope)
        for i, (test, args) in enumerate(zip(tests, ([1, 2], [0.5, 1]))):
            reply = answer(["call", channel.seq + 1, "add", encode(args), encode({})], scope)
            send_frame(candidate_end, reply)
            exec(compile(test, f"<test {i}>", "exec"), test_scope)
            recv_frame(candidate_end)
            _report(verdict_w, f"P {i}")
        _report(verdict_w, f"T tests {time.monotonic()}")
        os.close(verdict_w)
        verdict_w = -1
        read_all(verdict_r)
        _printable("x")
    finally:
        for fd in (judge_end, candidate_end, verdict_r, verdict_w):
            if fd >= 0:
                os.close(fd)


def _wait_for_supervisors() -> None:
    # Let running supervisors finish (a discarded one cleans up in milliseconds) before this process's exit
    # kills them through their parent-death signal. With SIGCHLD ignored, wait() returns once all are gone.
    try:
        while True:
            os.wait()
    except ChildProcessError:
        pass


def probe() -> int:
    """Exit status 0 when this process may create the sandbox's namespaces and mounts, twice in a row, the way a
    session does (a PID namespace per child, then back to its own for the next), and wait for them by pidfd."""
    own = os.open("/proc/self/ns/pid", os.O_RDONLY)
    for _ in range(2):
        try:
            pid = fork_in_new_pid_namespace(own)
        except OSError:
            return 1
        if pid == 0:
            try:
                enter_namespaces(1)
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                os._exit(0 if os.getpid() == 1 else 1)
            finally:
                os._exit(1)
        try:
            os.close(os.pidfd_open(pid))  # how a supervisor waits for its judges
        except OSError:
            return 1
        finally:
            exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if exit_code != 0:
            return 1
    return 0


def probe_jail() -> int:
    """Exit status 0 when a child in new namespaces can build the jail (:func:`enter_jail`), sees only its root,
    and can import a standard-library module that loads a shared library there (``decimal``: _decimal)."""
    try:
        plan = jail_plan()
        own = os.open("/proc/self/ns/pid", os.O_RDONLY)
        pid = fork_in_new_pid_namespace(own)
    except (OSError, StopIteration):
        return 1
    if pid == 0:
        status = 1
        try:
            enter_jail(plan, 1)
            import decimal  # noqa: F401 - not imported by -I -S before: lib-dynload and libmpdec in the jail

            status = 0 if not os.path.exists(RUNTIME_FILE) and os.path.isdir("/proc/1") else 1
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def probe_cgroup() -> int:
    """Exit status 0 when this process can make, join and remove a sandbox's cgroups (:func:`cgroup_plan`)."""
    try:
        plan = cgroup_plan()
    except (OSError, ValueError):
        return 1
    return 0 if plan is not None else 1


def probe_cgroup_cpu() -> int:
    """Exit status 0 when each sandbox's cgroups bound its CPU time too (:func:`cgroup_plan`)."""
    try:
        plan = cgroup_plan()
    except (OSError, ValueError):
        return 1
    return 0 if plan is not None and plan["cpu"] else 1


def probe_user_namespace() -> int:
    """Exit status 0 when a child can become nobody, enter a user namespace of its own mapped by this process,
    bound it and drop its capabilities in it."""
    sync, child_sync = (end.detach() for end in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
    pid = os.fork()
    if pid == 0:
        try:
            own_user_namespace(child_sync)
            os._exit(0 if os.getuid() == NOBODY and _owner_of_own_user_namespace() == NOBODY else 1)
        except BaseException:  # noqa: B036
            os._exit(1)
    try:
        map_user_namespace(pid, sync)
    except OSError:
        os.kill(pid, signal.SIGKILL)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _owner_of_own_user_namespace() -> int:
    """The uid that created this process's user namespace (ioctl_ns(2) NS_GET_OWNER_UID)."""
    fd = os.open("/proc/self/ns/user", os.O_RDONLY)
    try:
        owner = array.array("I", [0])
        fcntl.ioctl(fd, 0xB704, owner)
        return owner[0]
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    """``serve FD``, ``probe``, ``probe-userns``, ``probe-jail``, ``probe-cgroup``, ``probe-cgroup-cpu`` or ``plan``."""
    if argv[:1] == ["serve"] and len(argv) == 2:
        serve(int(argv[1]))
        return 0
    if argv == ["probe"]:
        return probe()
    if argv == ["probe-userns"]:
        return probe_user_namespace()
    if argv == ["probe-jail"]:
        return probe_jail()
    if argv == ["probe-cgroup"]:
        return probe_cgroup()
    if argv == ["probe-cgroup-cpu"]:
        return probe_cgroup_cpu()
    if argv == ["plan"]:  # what a server on this interpreter would bind and where it would make cgroups
        print(json.dumps({"jail": jail_plan(), "cgroup": cgroup_plan()}, indent=1))
        return 0
    usage = "serve FD | probe | probe-userns | probe-jail | probe-cgroup | probe-cgroup-cpu | plan"
    print(f"usage: sandbox_runtime.py {usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
