"""A sandbox for untrusted Python (model completions executed by the code reward).

Each run is a fresh ``python -I -S`` (no site-packages, no user environment) inside new network,
mount and PID namespaces (util-linux ``unshare``):
- **no network**: the new network namespace has only a loopback interface, and it is down;
- **no writes outside its directory**: private tmpfs mounts cover every world-writable directory
  (/tmp, /var/tmp, /dev/shm, /run/lock), and the code runs as ``nobody``, so nothing else is
  writable; the working directory is the fresh /tmp;
- **limits**: rlimits on address space, CPU seconds, processes (per uid, so fork bombs stop),
  file size and open files; a wall-clock timeout kills the namespace's init, and with it every
  process inside (nothing can escape by ``setsid`` or double-forking);
- a clean environment (``PATH`` and ``HOME`` only).

Where namespaces cannot be created (no privilege), :func:`run_tests` refuses to run unless the
caller explicitly allows the unsandboxed mode, which keeps only the rlimits and the timeout.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache

NOBODY = 65534


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 5.0
    cpu_seconds: int = 5
    memory_mb: int = 512
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64
    tmpfs_mb: int = 64


@dataclass
class Result:
    passed: list[bool]
    timed_out: bool = False
    exit_code: int | None = None
    sandboxed: bool = True
    stderr_tail: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


class SandboxUnavailable(RuntimeError):
    pass


# Runs as root inside the new namespaces, then drops to nobody before any untrusted code.
_BOOTSTRAP = r"""
import ctypes, json, os, resource, sys
cfg = json.loads(sys.argv[1])
if cfg["isolate"]:
    libc = ctypes.CDLL(None, use_errno=True)
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(d):
            opts = ("size=%dm,mode=1777" % cfg["tmpfs_mb"]).encode()
            if libc.mount(b"tmpfs", d.encode(), b"tmpfs", 0, opts) != 0:
                sys.exit("sandbox: cannot mount tmpfs on %s (errno %d)" % (d, ctypes.get_errno()))
    workdir = "/tmp"
else:
    workdir = cfg["workdir"]
payload = json.loads(sys.stdin.read())
mb = 1024 * 1024
for limit, value in ((resource.RLIMIT_AS, cfg["memory_mb"] * mb), (resource.RLIMIT_CPU, cfg["cpu_seconds"]),
                     (resource.RLIMIT_NPROC, cfg["max_processes"]), (resource.RLIMIT_FSIZE, cfg["max_file_mb"] * mb),
                     (resource.RLIMIT_NOFILE, cfg["max_open_files"]), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(limit, (value, value))
if os.getuid() == 0:
    os.setgroups([])
    os.setgid(%(nobody)d)
    os.setuid(%(nobody)d)
os.chdir(workdir)
os.environ.clear()
os.environ.update(PATH="/usr/bin:/bin", HOME=workdir)
out = os.fdopen(os.dup(1), "w")

def _run(code, tests, nonce):
    scope = {"__name__": "__main__"}
    try:
        exec(compile(code, "<completion>", "exec"), scope)
    except BaseException as exc:
        out.write("%s:load:%s\n" % (nonce, type(exc).__name__)); out.flush()
        return
    for i, test in enumerate(tests):
        try:
            exec(compile(test, "<test %d>" % i, "exec"), scope)
            out.write("%s:%d:pass\n" % (nonce, i))
        except BaseException as exc:
            out.write("%s:%d:fail:%s\n" % (nonce, i, type(exc).__name__))
        out.flush()

_run(payload["code"], payload["tests"], payload.pop("nonce"))
del payload
os._exit(0)
""".replace("%(nobody)d", str(NOBODY))


@lru_cache(maxsize=1)
def isolation_available() -> bool:
    """Whether this process may create the namespaces (root, or unprivileged user namespaces)."""
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--pid", "--fork", "--propagation", "private", "true"],
        capture_output=True,
        timeout=10,
    )
    return probe.returncode == 0


_PROBE_CODE = "import json, math, re, socket, collections, itertools"


@lru_cache(maxsize=1)
def sandbox_python() -> str:
    """An interpreter whose standard library ``nobody`` can read.

    The real interpreter (not a venv shim: -S gives it the standard library and nothing else),
    unless it lives somewhere private such as root's home: then the system's python3.
    """
    own = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    candidates = [own] + [p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    if not isolation_available():
        return own
    for candidate in dict.fromkeys(os.path.realpath(c) for c in candidates):
        if _run([candidate], _PROBE_CODE, ["assert True"], Limits(), isolate=True).passed == [True]:
            return candidate
    raise SandboxUnavailable(f"no interpreter among {candidates} can import the standard library as nobody")


def _parse(stdout: str, nonce: str, n_tests: int) -> tuple[list[bool], list[str]]:
    passed = [False] * n_tests
    notes = []
    for line in stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 3 or parts[0] != nonce:
            continue  # anything the code printed itself, forged lines included
        if parts[1] == "load":
            notes.append(f"code failed to load: {parts[2]}")
        elif parts[1].isdigit() and int(parts[1]) < n_tests:
            passed[int(parts[1])] = parts[2] == "pass"
    return passed, notes


def run_tests(code: str, tests: list[str], limits: Limits = Limits(), *, allow_unsandboxed: bool = False) -> Result:
    """Run ``code`` then each ``assert`` in ``tests`` separately; one bool per test.

    Tests that finished before a timeout or crash keep their verdict; the rest count as failed.
    """
    isolate = isolation_available()
    if not isolate and not allow_unsandboxed:
        raise SandboxUnavailable(
            "cannot create network/mount/PID namespaces here (needs root or unprivileged user namespaces); "
            "refusing to run untrusted code. Set the code verifier's allow_unsandboxed only on a disposable machine."
        )
    return _run([sandbox_python()], code, tests, limits, isolate=isolate)


def _run(python: list[str], code: str, tests: list[str], limits: Limits, *, isolate: bool) -> Result:
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="grpoflow-sandbox-") as workdir:
        if not isolate:
            os.chmod(workdir, 0o777)
        cfg = {**limits.__dict__, "isolate": isolate, "workdir": workdir}
        cmd = [*python, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(cfg)]
        if isolate:
            cmd = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", *cmd]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"},
            start_new_session=True, cwd=workdir,
        )
        payload = json.dumps({"code": code, "tests": tests, "nonce": nonce})
        timed_out = False
        try:
            stdout, stderr = proc.communicate(payload.encode(), timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            try:
                stdout, stderr = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # unsandboxed only: an escaped child holds the pipe
                stdout, stderr = b"", b"sandbox: output lost after timeout"
    passed, notes = _parse(stdout.decode(errors="replace"), nonce, len(tests))
    return Result(passed, timed_out, proc.returncode, isolate, stderr.decode(errors="replace")[-2000:], notes)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
