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

from verifiers import sandbox
from verifiers.code import extract_code, score_code
from verifiers.sandbox import Limits, SandboxUnavailable, run_tests

needs_isolation = pytest.mark.skipif(not sandbox.isolation_available(), reason="namespaces cannot be created here")
FAST = Limits(wall_seconds=3.0, cpu_seconds=3)


def nobody_processes() -> int:
    out = subprocess.run(["ps", "-u", str(sandbox.NOBODY), "-o", "pid="], capture_output=True, text=True).stdout
    return len(out.split())


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
    result = run_tests("def f():\n    while True: pass", ["assert 1 == 1", "f()"], FAST)
    assert result.timed_out and result.passed == [True, False]


@needs_isolation
def test_fork_bomb_is_contained_and_cleaned_up():
    before = nobody_processes()
    start = time.monotonic()
    result = run_tests("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", ["assert True"], FAST)
    assert result.passed == [False]
    assert time.monotonic() - start < 15
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
