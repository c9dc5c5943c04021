"""An interrupted run leaves nothing running once its prompt is back (flows/process_tree.py): every
process it started, and theirs, is stopped and waited for, one that ignores SIGTERM included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

# A process with three kinds of leftovers: a plain child, a grandchild under a shell, and a child
# that ignores SIGTERM (as a stage busy in C code may for a while). It reaps them and says whom.
SCRIPT = """
import json, subprocess, sys, time
from flows.process_tree import reap_children
plain = subprocess.Popen(["sleep", "60"])
shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
stubborn = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"],
    stdout=subprocess.PIPE)
stubborn.stdout.readline()
time.sleep(0.2)
print(json.dumps(reap_children(0.5)), flush=True)
"""


def test_every_process_a_run_started_is_gone_when_it_ends():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(pids) >= 4  # sleep, sh, its sleep, the stubborn one
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
