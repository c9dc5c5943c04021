"""A stage started under an interpreter without the project's packages runs under the checkout's venv
(tasks/interpreter.py; #51: `.venv/bin/dvc repro` from a plain shell ran the system's python)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import interpreter

ROOT = Path(__file__).resolve().parents[2]


def _bare_python() -> Path | None:
    """The interpreter this venv was made from: the same Python, without the project's packages."""
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", "python3"):
        path = Path(sys.base_prefix) / "bin" / name
        if path.is_file():
            return path
    return None


@pytest.mark.skipif(_bare_python() is None, reason="no base interpreter beside this venv")
def test_a_stage_started_by_a_bare_python_runs_under_the_checkouts_venv():
    bare = _bare_python()
    probe = subprocess.run(
        [bare, "-c", "import importlib.util as u; print(u.find_spec('deepspeed') is None)"],
        capture_output=True,
        text=True,
        check=True,
    )
    if probe.stdout.strip() != "True":
        pytest.skip(f"{bare} has the project's packages itself")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    ran = subprocess.run(
        [bare, "-m", "tasks.interpreter"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert Path(ran.stdout.strip()).resolve() == (ROOT / ".venv").resolve()  # its prefix, not the bare one


def test_without_a_venv_the_wrong_interpreter_stops_with_one_line_saying_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreter, "missing", lambda: ["torch", "deepspeed"])
    with pytest.raises(SystemExit) as stop:
        interpreter.ensure_project_env(tmp_path, ["python", "-m", "tasks.prepare"])
    message = str(stop.value)
    assert "lacks this project's packages (torch, deepspeed)" in message and "make setup" in message
    assert str(tmp_path / ".venv" / "bin" / "python") in message and "\n" not in message


def test_the_projects_own_interpreter_is_left_alone():
    assert interpreter.missing() == []
    interpreter.ensure_project_env(Path("/nonexistent"), ["python", "-m", "tasks.prepare"])  # returns, no exec
