"""Each escape an untrusted completion may try must end with reward 0, leave no trace, and leave
the calling process standing."""

import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from verifiers import sandbox, sandbox_runtime
from verifiers.code import extract_code, score_code
from verifiers.limits import Limits
from verifiers.sandbox import SandboxUnavailable, run_batch, run_tests
from verifiers.sandbox_runtime import NotPlain, decode, encode

needs_isolation = pytest.mark.skipif(not sandbox.isolation_available(), reason="namespaces cannot be created here")
FAST = Limits(wall_seconds=3.0, cpu_seconds=3)


def nobody_processes() -> int:
    """The sandbox user's processes, less those of other programs' sandboxes (other test runs, a training run
    on the same machine): anything under a fork server that is not this process's own."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,uid=,comm="], capture_output=True, text=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines() if line.strip()]
    parent = {int(row[0]): int(row[1]) for row in rows}
    ours = sandbox._server.process.pid if sandbox._server is not None else None
    foreign = {int(row[0]) for row in rows if row[3:] == ["sandbox-server"] and int(row[0]) != ours}

    def under_foreign_server(pid: int) -> bool:
        for _ in range(len(parent)):  # bounded: a pid reused while ps ran could make a cycle
            if pid <= 1 or pid in foreign:
                break
            pid = parent.get(pid, 0)
        return pid in foreign

    return sum(1 for row in rows if int(row[2]) == sandbox.NOBODY and not under_foreign_server(int(row[0])))


def nobody_processes_settle(before: int, within_s: float = 10.0) -> int:
    """The count of the sandbox user's processes once it falls back to ``before``, or after
    ``within_s``: the kernel kills a PID namespace with its init, but not instantly under load."""
    deadline = time.monotonic() + within_s
    while (count := nobody_processes()) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


def test_extract_code_prefers_the_last_python_block():
    text = "Here:\n```\nprint(1)\n```\nand\n```python\ndef f():\n    return 2\n```\n"
    assert extract_code(text) == "def f():\n    return 2\n"
    assert extract_code("def g(): return 3") == "def g(): return 3"


@needs_isolation
def test_correct_partial_and_broken_code():
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    assert score_code(code, ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]) == 1.0
    assert score_code(code, ["assert add(1, 2) == 3", "assert add(2, 2) == 5"]) == 0.5
    assert score_code("def add(a, b) return", ["assert add(1, 2) == 3"]) == 0.0


@needs_isolation
def test_infinite_loop_times_out_and_keeps_earlier_verdicts():
    # CPU time never exceeds wall time for one process, so a CPU rlimit above the wall limit cannot fire first
    result = run_tests(
        "def f():\n    while True: pass", ["assert 1 == 1", "f()"], Limits(wall_seconds=3.0, cpu_seconds=30)
    )
    assert result.timed_out and result.passed == [True, False]


@needs_isolation
def test_the_cpu_limit_ends_a_busy_loop_before_the_wall_limit_and_says_so():
    start = time.monotonic()
    result = run_tests(
        "def f():\n    while True: pass", ["assert 1 == 1", "f()"], Limits(wall_seconds=60, cpu_seconds=1)
    )
    assert result.passed == [True, False] and not result.timed_out
    assert time.monotonic() - start < 60
    assert any("candidate unreachable" in note for note in result.notes)


@needs_isolation
def test_fork_bomb_is_contained_and_cleaned_up():
    before = nobody_processes()
    start = time.monotonic()
    result = run_tests(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", ["assert True"], FAST
    )
    assert result.passed == [False]
    assert time.monotonic() - start < 60  # bounded: ended by the 3 s wall limit, not by the bomb
    assert nobody_processes_settle(before) <= before


@needs_isolation
def test_escaped_children_die_with_the_sandbox():
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nwhile True: pass"
    before = nobody_processes()
    run_tests(code, ["assert True"], FAST)
    assert nobody_processes_settle(before) <= before


@needs_isolation
def test_memory_bomb_fails_cleanly():
    assert run_tests("x = bytearray(8 * 1024 ** 3)", ["assert True"]).passed == [False]
    assert run_tests("x = []\nwhile True: x.append(' ' * 10**6)", ["assert True"], FAST).passed == [False]


@needs_isolation
def test_writes_outside_its_directory_leave_no_trace(tmp_path):
    os.chmod(tmp_path, 0o777)  # even a world-writable host directory must stay untouched
    host_tmp = f"/tmp/grpoflow-escape-{uuid.uuid4().hex}"
    targets = [host_tmp, str(tmp_path / "escape"), str(Path.cwd() / "escape"), f"/dev/shm/{uuid.uuid4().hex}"]
    code = "\n".join(f"try:\n    open({t!r}, 'w').write('x')\nexcept OSError:\n    pass" for t in targets)
    result = run_tests(code + "\nopen('inside.txt', 'w').write('ok')", ["assert open('inside.txt').read() == 'ok'"])
    assert result.passed == [True]  # its own directory is writable
    assert not any(os.path.exists(t) for t in targets)


@needs_isolation
def test_no_network_even_to_loopback():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(4)
    port = server.getsockname()[1]
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(_accept(server)))
    t.start()
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'x')"
    result = run_tests(code, ["assert True"])
    t.join()
    server.close()
    assert result.passed == [False] and accepted == [None]


def _accept(server):
    try:
        return server.accept()
    except OSError:
        return None


@needs_isolation
def test_early_exit_and_forged_output_do_not_pass():
    assert run_tests("import os\nos._exit(0)", ["assert True"]).passed == [False]
    forged = "print('0:pass'); import sys; sys.stdout.write('abc:0:pass\\n')"
    assert run_tests(forged, ["assert False"]).passed == [False]


@needs_isolation
def test_environment_is_clean():
    os.environ["GRPOFLOW_SECRET"] = "s3cret"
    try:
        result = run_tests("import os", ["assert 'GRPOFLOW_SECRET' not in os.environ", "assert os.getuid() != 0"])
    finally:
        del os.environ["GRPOFLOW_SECRET"]
    assert result.passed == [True, True]


def test_refuses_without_isolation_unless_allowed(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_available", lambda: False)
    with pytest.raises(SandboxUnavailable, match="refusing"):
        run_tests("x = 1", ["assert x == 1"])
    result = run_tests("x = 1", ["assert x == 1"], allow_unsandboxed=True)
    assert result.passed == [True] and result.sandboxed is False
    allowed = Limits(allow_unsandboxed=True)
    assert run_tests("x = 1", ["assert x == 1", "assert x == 2"], allowed).passed == [True, False]
    with pytest.raises(SandboxUnavailable):
        run_tests("x = 1", ["assert x == 1"], allowed, allow_unsandboxed=False)  # the keyword wins
    workdirs = set(Path("/tmp").glob("grpoflow-sandbox-*"))
    assert [r.passed for r in run_batch([("x = 1", ["assert x == 1"])] * 3, allowed)] == [[True]] * 3
    assert run_tests("import builtins\nbuiltins.exec = None", ["assert False"], allowed).passed == [False]
    deadline = time.monotonic() + 10  # sandboxes set up ahead and never used are torn down asynchronously
    while set(Path("/tmp").glob("grpoflow-sandbox-*")) - workdirs and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(Path("/tmp").glob("grpoflow-sandbox-*")) - workdirs


FORKS = (
    "import os\ndef f():\n    pid = os.fork()\n    if pid == 0:\n        os._exit(7)\n"
    "    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])"
)


@needs_isolation
def test_no_process_outlives_a_check():
    # The process that runs the completion leaves its session too: a parent-death signal does not reach
    # it once it is nobody, so only the PID namespace's end can.
    code = (
        "import os, time\nos.setsid()\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n"
        "            os.setsid()\n            time.sleep(30)\n            os._exit(0)\n    except OSError:\n"
        "        break\ntime.sleep(30)"
    )
    before = nobody_processes()
    result = run_tests(code, ["assert True"], FAST)
    assert result.timed_out and result.passed == [False]
    assert nobody_processes_settle(before) <= before
    assert run_tests(FORKS, ["assert f() == 7"]).passed == [True]  # RLIMIT_NPROC is not used up by leftovers


@needs_isolation
def test_sysv_ipc_objects_stay_inside():
    key = 0x5EED0000 + os.getpid() % 0xFFFF
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"made = libc.shmget({key}, 4096, 0o1000 | 0o600) >= 0 and libc.semget({key}, 1, 0o1000 | 0o600) >= 0"
    )
    assert run_tests(code, ["assert made"]).passed == [True]
    for table in ("/proc/sysvipc/shm", "/proc/sysvipc/sem"):
        keys = [int(line.split()[0]) for line in Path(table).read_text().splitlines()[1:] if line.split()]
        assert key not in keys


@needs_isolation
def test_output_is_capped_and_the_stream_closed():
    code = (
        "import sys\nstopped = False\ntry:\n    while True:\n        sys.stdout.write('x' * 65536)\n"
        "        sys.stdout.flush()\nexcept BrokenPipeError:\n    stopped = True"
    )
    result = run_tests(code, ["assert stopped"], Limits(wall_seconds=20, max_output_kb=256))
    assert result.passed == [True] and not result.timed_out  # the writer saw the pipe close, nothing buffered it
    assert any("256 KiB" in note for note in result.notes) and len(result.stderr_tail) <= 2000


@needs_isolation
def test_host_processes_are_invisible():
    code = (
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "cmdlines = [open(f'/proc/{p}/cmdline', 'rb').read() for p in pids]"
    )
    result = run_tests(code, ["assert len(pids) <= 3", "assert not any(b'pytest' in c for c in cmdlines)"])
    assert result.passed == [True, True]


@needs_isolation
def test_batch_checks_are_isolated_and_leave_nothing():
    marker = (
        "import os\nos.makedirs('/tmp/m', exist_ok=True)\nmine = str(os.getpid()) + '-' + os.urandom(4).hex()\n"
        "open('/tmp/m/' + mine, 'w').close()\nseen = os.listdir('/tmp/m')"
    )
    items = [(marker, ["assert seen == [mine]"])] * 8 + [(FORKS, ["assert f() == 7"])] * 4
    before = nobody_processes()
    results = run_batch(items, workers=3)
    assert [r.passed for r in results] == [[True]] * 12 and all(r.sandboxed for r in results)
    assert nobody_processes_settle(before) <= before  # set-up-ahead sandboxes that were never used included


# Reads its own memory for anything shaped like a secret (made dumpable again, so /proc/self/mem is readable).
SCAN = (
    "import ctypes, re\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
    "def secrets():\n    found = set()\n    mem = open('/proc/self/mem', 'rb', 0)\n"
    "    for line in open('/proc/self/maps'):\n        span, perms = line.split()[:2]\n"
    "        if 'r' not in perms or line.rstrip().endswith(('[vvar]', '[vsyscall]', '[vvar_vclock]')):\n"
    "            continue\n        lo, hi = (int(x, 16) for x in span.split('-'))\n        try:\n"
    "            mem.seek(lo)\n            found.update(re.findall(rb'SECRET-[0-9]{6}', mem.read(hi - lo)))\n"
    "        except (OSError, OverflowError, ValueError):\n            pass\n"
    "    return sorted(s.decode() for s in found)\n"
)


@needs_isolation
def test_checks_of_one_session_see_nothing_of_the_earlier_ones(monkeypatch):
    # One worker: one supervisor runs every check, each in a sandbox it set up while the previous check ran.
    # Nothing of an earlier check (files, processes, its tests, its output) may reach a later one.
    sessions = []
    open_session = sandbox._open_session
    monkeypatch.setattr(sandbox, "_open_session", lambda *args: sessions.append(open_session(*args)) or sessions[-1])
    leaves = (
        "import os, time\nopen('/tmp/left', 'w').write('x')\nopen('/dev/shm/left', 'w').write('x')\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
        "print('SECRET-141421')"
    )
    looks = SCAN + (
        "import os\nleft = [p for p in ('/tmp/left', '/dev/shm/left') if os.path.exists(p)]\n"
        "others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) > os.getpid()]"
    )
    control = SCAN + "OWN = 'SECRET-000000'"  # the scan does find what is in the candidate's memory
    items = [
        (leaves, ["assert 'SECRET-271828'"]),
        (looks, ["assert secrets() == []", "assert left == []", "assert others == []"]),
        (control, ["assert secrets() == ['SECRET-000000']"]),
    ]
    before = nobody_processes()
    results = run_batch(items, workers=1)
    assert [r.passed for r in results] == [[True], [True, True, True], [True]] and len(sessions) == 1
    assert "SECRET-141421" in results[0].stderr_tail  # the output reached the caller, and only the caller
    assert nobody_processes_settle(before) <= before


@needs_isolation
def test_a_session_goes_on_after_a_check_that_timed_out_or_crashed():
    items = [
        ("while True: pass", ["assert True"]),
        ("import os\nos._exit(3)", ["assert True"]),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", ["assert True"]),
        ("x = 1", ["assert x == 1"]),
    ]
    results = run_batch(items, Limits(wall_seconds=4.0, cpu_seconds=60), workers=1)
    assert [(r.passed, r.timed_out) for r in results] == [
        ([False], True),
        ([False], False),
        ([False], False),
        ([True], False),
    ]


@pytest.mark.skipif(not sandbox.user_namespaces_available(), reason="user namespaces cannot be created here")
def test_a_fork_bomb_does_not_starve_the_checks_beside_it():
    # RLIMIT_NPROC counts a uid's processes per user namespace: each candidate has its own, so a bomb in one
    # parallel check cannot make fork fail in another (it did while every sandbox shared nobody's count).
    bomb = (
        "import os, time\nstart = time.monotonic()\nwhile time.monotonic() - start < 3:\n    try:\n"
        "        os.fork()\n    except OSError:\n        time.sleep(0.01)"
    )
    forks = (
        "import os\ndef f(n):\n    ok = 0\n    for _ in range(n):\n        pid = os.fork()\n"
        "        if pid == 0:\n            os._exit(7)\n"
        "        ok += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7\n    return ok"
    )
    before = nobody_processes()
    limits = Limits(wall_seconds=10, cpu_seconds=5)  # the bomb gives up after 3 s; honest checks have time
    results = run_batch([(bomb, ["assert True"])] + [(forks, ["assert f(100) == 100"])] * 4, limits, workers=3)
    assert [r.passed for r in results[1:]] == [[True]] * 4
    assert nobody_processes_settle(before) <= before


USER_NAMESPACE_PROBE = """
import array, ctypes, fcntl, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open('/proc/self/ns/user', os.O_RDONLY)
owner = array.array('I', [0])
fcntl.ioctl(fd, 0xB704, owner)  # NS_GET_OWNER_UID: whom the kernel charges for what this namespace holds
os.close(fd)
owner = owner[0]
opened = []
for _ in range({tries}):
    got = libc.inotify_init()
    if got < 0:
        break
    opened.append(got)
for got in opened:
    os.close(got)
nested = libc.unshare(0x10000000) == 0
caps = [line.split()[1] for line in open('/proc/self/status') if line.startswith(('CapEff', 'CapPrm'))]
uid_map = open('/proc/self/uid_map').read().split()
"""


@pytest.mark.skipif(not sandbox.user_namespaces_available(), reason="user namespaces cannot be created here")
def test_what_a_check_holds_in_the_kernel_is_charged_to_nobody_and_bounded():
    # A user namespace made by root charged host root with the check's inotify instances: 128 of them left every
    # root process on the machine without one. The probe opens at most one more than the sandbox's own bound,
    # so it uses up nothing on the host, whichever code it runs against.
    allowed = sandbox_runtime.USER_NAMESPACE_LIMITS["max_inotify_instances"]
    tests = [
        f"assert owner == {sandbox.NOBODY}, owner",
        f"assert len(opened) == {allowed}, len(opened)",
        "assert not nested",
        "assert caps == ['0000000000000000'] * 2, caps",
        f"assert uid_map == ['{sandbox.NOBODY}', '{sandbox.NOBODY}', '1'], uid_map",
    ]
    result = run_tests(USER_NAMESPACE_PROBE.format(tries=allowed + 1), tests)
    assert result.passed == [True] * len(tests), (result.notes, result.stderr_tail)


@needs_isolation
def test_a_write_end_held_elsewhere_does_not_stall_a_check(monkeypatch):
    # The caller is a multi-threaded training process: a child it forks while a check holds the tests and code
    # pipes (fork keeps close-on-exec descriptors) keeps their write ends open after the caller closes its own.
    # Each check here runs while a duplicate of both write ends is open in this process and in a forked child
    # that outlives the check: the payloads' length prefix, not EOF, must end the judge's and candidate's reads.
    held: list[int] = []
    children: list[int] = []
    release_r, release_w = os.pipe()  # closed here at the end: every child then sees EOF and exits
    original = sandbox._Pipes.__init__

    def holding(self, fds):
        original(self, fds)
        assert not any(os.get_inheritable(fd) for fd in fds)  # close-on-exec, like every fd this side holds
        held.extend(os.dup(fd) for fd in (self.tests_w, self.code_w))
        pid = os.fork()
        if pid == 0:  # holds every inherited fd until released, whatever the check does
            try:
                os.close(release_w)
                os.read(release_r, 1)
            finally:
                os._exit(0)
        children.append(pid)

    monkeypatch.setattr(sandbox._Pipes, "__init__", holding)
    code = "def add(a, b):\n    return a + b"
    items = [(code, ["assert add(1, 2) == 3", "assert add(2, 2) == 5"])] * 3 + [("x = 1", ["assert x == 1"])]
    limits = Limits(wall_seconds=60, cpu_seconds=10)  # generous: a stalled check would time out, never pass
    try:
        single = run_tests(code, ["assert add(1, 2) == 3"], limits)
        results = run_batch(items, limits, workers=2)
    finally:
        for fd in [*held, release_r, release_w]:
            os.close(fd)
        for pid in children:
            os.waitpid(pid, 0)
    assert len(children) >= 5 and len(held) == 2 * len(children)  # and the fork server's probe, when it started
    assert (single.passed, single.timed_out) == ([True], False)
    assert [(r.passed, r.timed_out) for r in results] == [([True, False], False)] * 3 + [([True], False)]


def test_world_writable_dirs_are_looked_up_for_each_sandbox(monkeypatch, tmp_path):
    # A world-writable directory that appears while a session runs gets its private tmpfs from the next sandbox
    # on: enter_namespaces looks the directories up itself, each time (in a forked child, as a judge does).
    if not sandbox.isolation_available():
        pytest.skip("namespaces cannot be created here")
    late = tmp_path / "late"
    monkeypatch.setattr(sandbox_runtime, "WRITABLE_DIRS", (str(late),))

    def in_new_namespaces() -> int:
        pid = os.fork()
        if pid == 0:
            status = 3
            try:
                sandbox_runtime.enter_namespaces(1)
                mounted = any(line.split()[4] == str(late) for line in open("/proc/self/mountinfo"))
                if mounted:
                    (late / "inside").write_text("x")
                status = 0 if mounted else 2
            finally:
                os._exit(status)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    assert in_new_namespaces() == 2  # not there yet: nothing to cover, and no failure
    late.mkdir()
    assert in_new_namespaces() == 0  # covered by a tmpfs of its own...
    assert list(late.iterdir()) == []  # ...so the write stayed inside


@needs_isolation
def test_every_world_writable_dir_is_a_private_tmpfs(monkeypatch):
    # Without the jail (a machine that refuses pivot_root), as here; in the jail no host directory is there at all
    # (test_sandbox_jail).
    monkeypatch.setattr(sandbox, "jail_available", lambda: False)
    dirs = sandbox_runtime.existing_writable_dirs()
    code = (
        "fs = {}\nfor line in open('/proc/self/mountinfo'):\n    fs[line.split()[4]] = line.split(' - ')[1].split()[0]"
    )
    result = run_tests(code, [f"assert fs.get({d!r}) == 'tmpfs', fs.get({d!r})" for d in dirs])
    assert dirs and result.passed == [True] * len(dirs)


@needs_isolation
def test_a_dead_fork_server_is_replaced():
    server = sandbox._get_server()
    server.process.kill()
    server.process.wait()
    assert run_tests("x = 1", ["assert x == 1"]).passed == [True]
    assert sandbox._get_server() is not server


def test_plain_data_round_trips_with_exact_types():
    values = [
        None,
        True,
        0,
        -(2**80),
        2**53,
        1.5,
        float("inf"),
        -0.0,
        1 + 2j,
        "é\ud800",
        b"\x00",
        (1, [2, {3: (4,)}]),
        {frozenset({1}), (2,)},
        range(1, 9, 2),
        {"a": [None]},
    ]
    for value in values:
        back = decode(encode(value))
        assert back == value and type(back) is type(value)
    assert list(decode(encode(iter([1, 2])))) == [1, 2]
    nan = decode(encode(float("nan")))
    assert nan != nan


@pytest.mark.parametrize(
    "value", [type("I", (int,), {})(1), type("L", (list,), {})(), object(), [object()], {1: print}, lambda: 1]
)
def test_non_plain_values_are_refused(value):
    with pytest.raises(NotPlain):
        encode(value)


def test_deep_or_huge_values_are_refused():
    deep: list = []
    for _ in range(sandbox_runtime.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(NotPlain):
        encode(deep)
    with pytest.raises(NotPlain):
        encode(iter(range(sandbox_runtime.MAX_ITEMS + 1)))


@pytest.mark.parametrize(
    "tree",
    [
        {"a": 1},
        [],
        ["x", 1],
        ["d", 1],
        ["s", ["l"]],
        ["i", 5],
        ["b", "zz"],
        ["ref", "f"],
        ["r", 1, 2, 0.5],
        ["l"] * 3 + [[]],
    ],
)
def test_malformed_trees_are_refused(tree):
    with pytest.raises(NotPlain):
        decode(tree)


# Each raises from the candidate's f; a test that calls f must fail, whatever Python machinery sits in between.
CONTROL_FLOW_CASES = {
    "StopIteration": "raise StopIteration",
    "StopAsyncIteration": "raise StopAsyncIteration",
    "GeneratorExit": "raise GeneratorExit",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "SystemExit": "raise SystemExit(0)",
    "own_subclass": "class Stop(StopIteration):\n        pass\n    raise Stop",
}


@needs_isolation
@pytest.mark.parametrize("kind", sorted(CONTROL_FLOW_CASES))
def test_an_exception_of_the_candidate_fails_the_test_that_called_it(kind):
    code = f"def f(x):\n    {CONTROL_FLOW_CASES[kind]}"
    tests = [
        "assert all(map(lambda x: f(x) == x * x, [1, 2, 3]))",  # StopIteration would end map() quietly
        "assert not any(filter(lambda x: f(x) != x * x, [1, 2]))",
        "assert list(zip([1], map(f, [1]))) == []",
        "import asyncio\nclass It:\n    def __aiter__(self):\n        return self\n"
        "    async def __anext__(self):\n        return f(1)\n"
        "async def main():\n    async for _ in It():\n        return 'looped'\n    return 'ended'\n"
        "assert asyncio.run(main()) == 'ended'",
    ]  # StopAsyncIteration would end the async for quietly
    assert run_tests(code, tests).passed == [False] * len(tests)


def test_the_iteration_protocol_s_signals_do_not_cross_the_boundary_as_themselves():
    for name in ("StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt"):
        assert type(sandbox_runtime._candidate_exception(name, "m")) is sandbox_runtime.CandidateError
    assert type(sandbox_runtime._candidate_exception("ValueError", "m")) is ValueError  # tests may expect those


@needs_isolation
def test_an_expected_builtin_exception_still_passes():
    code = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x"
    tests = ["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError", "assert f(2) == 2"]
    assert run_tests(code, tests).passed == [True, True]


@needs_isolation
def test_the_trusted_setup_replaces_the_completion_s_names_for_the_tests_only():
    code = "def helper(x):\n    return 0\ndef f(x):\n    return helper(x)"
    setup = "import math\ndef helper(x):\n    return math.floor(x) + 1"
    tests = ["assert helper(1.5) == 2", "assert f(1.5) == 0", "assert math.pi > 3"]
    assert run_tests(code, tests, setup=setup).passed == [True, True, True]
    assert run_tests(code, tests).passed == [False, True, False]
    failing = run_tests(code, tests, setup="raise RuntimeError('x')")
    assert failing.passed == [False] * 3 and any("setup failed: RuntimeError" in n for n in failing.notes)
    batch = run_batch([(code, tests, setup), (code, tests)], workers=2)
    assert [r.passed for r in batch] == [[True, True, True], [False, True, False]]
    with pytest.raises(ValueError, match="row 0: field 'setup' must be a str"):
        run_batch([(code, tests, 3)])  # type: ignore[list-item]
