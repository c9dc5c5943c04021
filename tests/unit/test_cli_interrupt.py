"""A Ctrl-C that lands inside a finalizer, where Python swallows its KeyboardInterrupt and prints a
traceback, still stops a stage: quietly there, at the loop's next check_interrupted()."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from tasks.cli import catch_interrupts, check_interrupted
catch_interrupts()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs here, inside the finalizer: its KeyboardInterrupt is swallowed

Finalized()
print("after the finalizer", flush=True)  # Python went on, as it does
try:
    check_interrupted()
except KeyboardInterrupt:
    print("stopped at the check", flush=True)
    sys.exit(130)
sys.exit(0)
"""


def test_a_ctrl_c_swallowed_by_a_finalizer_stops_at_the_next_check_without_a_traceback():
    code = textwrap.dedent(SCRIPT.format(root=str(ROOT)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 130, out
    assert out.stdout.splitlines() == ["after the finalizer", "stopped at the check"]
    assert "Traceback" not in out.stderr and "KeyboardInterrupt" not in out.stderr, out.stderr


def test_without_a_ctrl_c_the_check_passes():
    from tasks import cli

    cli._INTERRUPTED.clear()
    cli.check_interrupted()  # nothing recorded: no exception
