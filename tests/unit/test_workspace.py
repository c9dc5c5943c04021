"""The workspace lock and the run's journaled edits, against real processes killed with SIGKILL;
what a DVC experiment commit carries."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows import experiments, workspace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def start(code: str, ready: Path) -> subprocess.Popen:
    """A Python process that runs ``code`` with flows.workspace imported, then touches ``ready``."""
    script = f"from flows import workspace\nfrom pathlib import Path\n{textwrap.dedent(code)}"
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return proc


def test_a_second_run_waits_for_the_first_and_a_killed_holder_frees_the_workspace(in_tmp):
    holder = start("""
with workspace.exclusive("first-run"):
    Path("ready").touch()
    import time; time.sleep(60)
""", in_tmp / "ready")
    messages: list[str] = []
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -9 {holder.pid}"])
    t0 = time.monotonic()
    with workspace.exclusive("second-run", log=messages.append, poll_s=0.05):
        waited = time.monotonic() - t0
    killer.wait()
    holder.wait()
    assert waited >= 0.4  # it waited for the holder, and got the workspace once the holder died
    assert len(messages) == 1 and "busy with flow run first-run" in messages[0]


def test_edits_are_undone_after_the_run_and_after_a_kill(in_tmp):
    (in_tmp / "params.yaml").write_text("a: 1\n")
    with workspace.edits({"params.yaml": "a: 2\n", "new.txt": "x"}):
        assert (in_tmp / "params.yaml").read_text() == "a: 2\n" and (in_tmp / "new.txt").exists()
    assert (in_tmp / "params.yaml").read_text() == "a: 1\n" and not (in_tmp / "new.txt").exists()
    assert not workspace.JOURNAL.exists()

    run = start("""
with workspace.edits({"params.yaml": "a: 3\\n"}):
    Path("ready").touch()
    import time; time.sleep(60)
""", in_tmp / "ready")
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert (in_tmp / "params.yaml").read_text() == "a: 3\n"  # the kill left the edit behind
    messages: list[str] = []
    with workspace.exclusive("next-run", log=messages.append):
        assert (in_tmp / "params.yaml").read_text() == "a: 1\n"  # restored before the next run starts
    assert "params.yaml" in messages[0] and "interrupted run" in messages[0]


def test_unchanged_files_are_not_journaled(in_tmp):
    (in_tmp / "params.yaml").write_text("a: 1\n")
    with workspace.edits({"params.yaml": "a: 1\n"}):
        assert not workspace.JOURNAL.exists()


def test_an_experiment_carries_metrics_plots_and_lock_but_not_checkpoints(in_tmp):
    shutil.copy(ROOT / "dvc.yaml", in_tmp / "dvc.yaml")
    for path in ["dvc.lock", "metrics/grpo.json", "metrics/grpo_history.csv", "reports/compare/table.json",
                 "checkpoints/grpo/latest", "metrics/run.json"]:
        (in_tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (in_tmp / path).write_text("{}")
    carried = experiments.untracked_outputs()
    assert {"dvc.lock", "metrics/grpo.json", "metrics/grpo_history.csv", "reports/compare", "metrics/run.json"} <= set(carried)
    assert not any(p.startswith("checkpoints") for p in carried)
    assert "metrics/ppo.json" not in carried  # absent files are not named


@pytest.mark.parametrize("name, run_id, expected", [
    ("witty-penguin", "0865752c-8375-4d4e-b000-000000000000", "witty-penguin-0865752c"),
    ("odd name/with:chars", "abc", "odd-name-with-chars-abc"),
    ("", "12345678-9", "run-12345678"),
])
def test_experiment_names_are_git_ref_safe_and_unique_per_run(name, run_id, expected):
    assert experiments.experiment_name(name, run_id) == expected
