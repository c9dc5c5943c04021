"""`dvc exp apply` and what runs write beside DVC's outputs: the run page, its stage logs, make bench's and
make gpu-check's results. DVC 3.67 deleted every ignored file of a folder git did not track once an
experiment held files in it (reports/compare, metrics/*.json); the folders' own tracked .gitignore keeps
them known to git. Real git and DVC, on a project of one stage that writes where the pipeline's do."""

from __future__ import annotations

import shutil
import sys

import pytest

from flows.experiments import untracked_outputs
from tests.e2e.conftest import GIT, REPO, run

pytestmark = pytest.mark.e2e

IGNORES = (".gitignore", "reports/.gitignore", "metrics/.gitignore")
STAGE = """stages:
  compare:
    cmd: python -c "import pathlib as p; p.Path('reports/compare').mkdir(parents=True, exist_ok=True); \
p.Path('metrics').mkdir(exist_ok=True); p.Path('reports/compare/table.md').write_text('t'); \
p.Path('metrics/compare.json').write_text('{}')"
    outs:
    - reports/compare:
        cache: false
    metrics:
    - metrics/compare.json:
        cache: false
"""
# What a run, make bench and make gpu-check leave that no experiment holds.
LOCAL = ("reports/run.html", "reports/logs/grpo.log", "metrics/bench.json", "metrics/gpu_check.json")


def test_applying_an_experiment_keeps_the_run_page_logs_and_benchmark_results(tmp_path, run_env, monkeypatch):
    tmp_path = tmp_path / "project"  # beside the tools' homes, which run_env puts in tmp_path
    for rel in IGNORES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    (tmp_path / "dvc.yaml").write_text(STAGE)
    dvc = [sys.executable, "-m", "dvc"]
    for cmd in (["git", "init", "-q"], [*dvc, "init", "-q"], ["git", "add", "-A"], [*GIT, "commit", "-qm", "init"]):
        assert run(cmd, tmp_path, run_env).returncode == 0
    assert run([*dvc, "repro"], tmp_path, run_env).returncode == 0
    monkeypatch.chdir(tmp_path)
    include = [arg for path in untracked_outputs() for arg in ("--include-untracked", path)]  # as flows.experiments
    assert run([*dvc, "exp", "save", "--name", "nightly", *include], tmp_path, run_env).returncode == 0
    for rel in LOCAL:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    applied = run([*dvc, "exp", "apply", "nightly"], tmp_path, run_env)
    assert applied.returncode == 0, applied.tail()
    assert (tmp_path / "reports" / "compare" / "table.md").is_file()  # the experiment's own files are in place
    assert [rel for rel in LOCAL if not (tmp_path / rel).is_file()] == []
    assert all((tmp_path / rel).read_text() == rel for rel in LOCAL)
    ignored = run(["git", "check-ignore", *LOCAL], tmp_path, run_env).stdout.split()  # and still out of git's sight
    assert ignored == list(LOCAL)
