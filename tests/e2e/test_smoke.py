"""``--smoke`` on the tiny default: every stage runs, SFT included, in a scratch copy, and the
workspace it was started from is left exactly as it was (no outputs, no lock, no params edits)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tasks.stages import STAGES
from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable


def test_a_smoke_run_runs_every_stage_and_leaves_the_workspace_as_it_was(project, run_env):
    ran = run([PY, "-m", "flows.pipeline", "--smoke"], project, run_env, timeout=1800)
    assert ran.returncode == 0, ran
    for stage in (s.name for s in STAGES if not s.opt_in):
        assert f"{stage:>20}: ran in" in ran.stdout, stage
    assert "rehearsal of params/default.yaml: passed" in ran.stdout
    for output in ("dvc.lock", "models", "metrics", "data/prepared", "mlflow.db"):
        assert not (project / output).exists(), output
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=True)
    assert status.stdout == ""
