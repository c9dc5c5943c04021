"""The workspace lock and the run's journaled edits, against real processes killed with SIGKILL;
what a DVC experiment commit carries."""

from __future__ import annotations

import json
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
    holder = start(
        """
with workspace.exclusive("first-run"):
    Path("ready").touch()
    import time; time.sleep(60)
""",
        in_tmp / "ready",
    )
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
    with workspace.edits({"params.yaml": "a: 2\n", "params/new.yaml": "x"}):
        assert (in_tmp / "params.yaml").read_text() == "a: 2\n" and (in_tmp / "params" / "new.yaml").exists()
    assert (in_tmp / "params.yaml").read_text() == "a: 1\n" and not (in_tmp / "params" / "new.yaml").exists()
    assert not workspace.JOURNAL.exists()

    run = start(
        """
with workspace.edits({"params.yaml": "a: 3\\n"}):
    Path("ready").touch()
    import time; time.sleep(60)
""",
        in_tmp / "ready",
    )
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


def write_journal(files: dict) -> None:
    workspace.STATE_DIR.mkdir(exist_ok=True)
    workspace.JOURNAL.write_text(json.dumps({"version": 2, "files": files}))


@pytest.mark.parametrize(
    "damage, named",
    [
        (b'{"version": 2, "files": {"params.yaml": {"original": "a: 1\\n", "wri', "params.yaml"),  # truncated
        (b'{"version": 2, "files": {"params.yaml": {"original": 1}}}', "params.yaml"),
        (b'{"version": 9, "files": {"params.yaml": {"original": "a: 1"}}}', "params.yaml"),
        (b"\xff\xfe\x00{", "dvc.yaml and the params file"),
        (b'["params.yaml"]', "dvc.yaml and the params file"),
        (b"", "dvc.yaml and the params file"),
    ],
)
def test_a_damaged_journal_is_moved_aside_with_a_warning_and_never_blocks_a_run(in_tmp, damage, named):
    (in_tmp / "params.yaml").write_text("a: 3\n")  # as the interrupted run left it
    workspace.STATE_DIR.mkdir()
    workspace.JOURNAL.write_bytes(damage)
    messages: list[str] = []
    with workspace.exclusive("next-run", log=messages.append):
        pass
    aside = list(workspace.STATE_DIR.glob("restore.json.corrupt-*"))
    assert not workspace.JOURNAL.exists() and len(aside) == 1 and aside[0].read_bytes() == damage
    assert len(messages) == 1 and str(workspace.JOURNAL) in messages[0] and str(aside[0]) in messages[0]
    assert "git checkout" in messages[0] and named in messages[0]
    assert (in_tmp / "params.yaml").read_text() == "a: 3\n"  # nothing guessed from a damaged journal
    with workspace.exclusive("the-run-after", log=messages.append):
        pass
    assert len(messages) == 1


def test_only_dvc_yaml_and_params_files_inside_the_workspace_are_restored(in_tmp, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (in_tmp / "link.yaml").symlink_to(elsewhere / "target.yaml")
    (in_tmp / "params.yaml").write_text("a: 3\n")
    (in_tmp / ".git").mkdir()
    hostile = [
        "../outside.yaml",
        str(elsewhere / "abs.yaml"),
        ".git/config",
        "notes.txt",
        "params/../../up.yaml",
        "link.yaml",
    ]
    write_journal(
        {
            "params.yaml": {"original": "a: 1\n", "written": "a: 3\n"},
            **{p: {"original": "overwritten", "written": None} for p in hostile},
        }
    )
    messages: list[str] = []
    restored = workspace.restore_interrupted(messages.append)
    assert restored == ["params.yaml"] and (in_tmp / "params.yaml").read_text() == "a: 1\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == [] and not (in_tmp.parent / "outside.yaml").exists()
    assert not (in_tmp / ".git" / "config").exists() and not (in_tmp / "notes.txt").exists()
    warning = next(m for m in messages if "names files a run never edits" in m)
    assert all(repr(p) in warning for p in hostile)
    assert not workspace.JOURNAL.exists() and len(list(workspace.STATE_DIR.glob("restore.json.corrupt-*"))) == 1


@pytest.mark.parametrize("path", ["notes.txt", "../outside.yaml", ".dvc/config.yaml", "ELSEWHERE/abs.yaml"])
def test_a_run_may_only_edit_dvc_yaml_and_params_files_in_the_workspace(in_tmp, tmp_path_factory, path):
    path = path.replace("ELSEWHERE", str(tmp_path_factory.mktemp("elsewhere")))
    with pytest.raises(ValueError, match="may only edit dvc.yaml and params files"):
        with workspace.edits({path: "x"}):
            pass
    assert not workspace.JOURNAL.exists() and not (in_tmp / path).exists()


def test_a_hand_edit_during_the_run_is_kept_aside_with_a_warning(in_tmp):
    (in_tmp / "params.yaml").write_text("a: 1\n")
    messages: list[str] = []
    with workspace.edits({"params.yaml": "a: 2\n"}, log=messages.append):
        (in_tmp / "params.yaml").write_text("a: 5\n")  # the user, while the run goes on
    assert (in_tmp / "params.yaml").read_text() == "a: 1\n"
    assert (in_tmp / "params.yaml.edited-during-run").read_text() == "a: 5\n"
    assert len(messages) == 1 and "params.yaml was edited by hand" in messages[0]
    assert "params.yaml.edited-during-run" in messages[0]
    with workspace.edits({"params.yaml": "a: 2\n"}, log=messages.append):
        (in_tmp / "params.yaml").write_text("a: 6\n")
    assert (in_tmp / "params.yaml.edited-during-run.1").read_text() == "a: 6\n"  # the first one is not overwritten


def test_a_hand_edit_after_a_killed_run_is_kept_aside_too(in_tmp):
    (in_tmp / "params.yaml").write_text("a: 1\n")
    run = start(
        """
with workspace.edits({"params.yaml": "a: 3\\n"}):
    Path("ready").touch()
    import time; time.sleep(60)
""",
        in_tmp / "ready",
    )
    run.send_signal(signal.SIGKILL)
    run.wait()
    (in_tmp / "params.yaml").write_text("a: 7\n")
    messages: list[str] = []
    assert workspace.restore_interrupted(messages.append) == ["params.yaml"]
    assert (in_tmp / "params.yaml").read_text() == "a: 1\n"
    assert (in_tmp / "params.yaml.edited-during-run").read_text() == "a: 7\n"
    assert "edited by hand" in messages[0] and "left edited by an interrupted run" in messages[1]


def test_a_journal_of_the_previous_version_is_still_restored(in_tmp):
    (in_tmp / "params.yaml").write_text("a: 3\n")
    workspace.STATE_DIR.mkdir()
    workspace.JOURNAL.write_text(json.dumps({"params.yaml": "a: 1\n", "params/new.yaml": None}))
    (in_tmp / "params").mkdir()
    (in_tmp / "params" / "new.yaml").write_text("x")
    assert workspace.restore_interrupted(lambda m: None) == ["params.yaml", "params/new.yaml"]
    assert (in_tmp / "params.yaml").read_text() == "a: 1\n" and not (in_tmp / "params" / "new.yaml").exists()


def test_an_experiment_carries_metrics_plots_and_lock_but_not_checkpoints(in_tmp):
    shutil.copy(ROOT / "dvc.yaml", in_tmp / "dvc.yaml")
    for path in [
        "dvc.lock",
        "metrics/grpo.json",
        "metrics/grpo_history.csv",
        "reports/compare/table.json",
        "checkpoints/grpo/latest",
        "metrics/run.json",
    ]:
        (in_tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (in_tmp / path).write_text("{}")
    carried = experiments.untracked_outputs()
    expected = {"dvc.lock", "metrics/grpo.json", "metrics/grpo_history.csv", "reports/compare", "metrics/run.json"}
    assert expected <= set(carried)
    assert not any(p.startswith("checkpoints") for p in carried)
    assert "metrics/ppo.json" not in carried  # absent files are not named


@pytest.mark.parametrize(
    "name, run_id, expected",
    [
        ("witty-penguin", "0865752c-8375-4d4e-b000-000000000000", "witty-penguin-0865752c"),
        ("odd name/with:chars", "abc", "odd-name-with-chars-abc"),
        ("", "12345678-9", "run-12345678"),
    ],
)
def test_experiment_names_are_git_ref_safe_and_unique_per_run(name, run_id, expected):
    assert experiments.experiment_name(name, run_id) == expected
