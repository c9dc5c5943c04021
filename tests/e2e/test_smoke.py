"""``--smoke`` on a set of the user's own files (the tiny default's settings otherwise): every stage runs,
SFT included, in a scratch copy, and the workspace it was started from is left exactly as it was (no
outputs, no lock, no params edits)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.stages import STAGES
from tests.e2e.conftest import GIT, run

pytestmark = pytest.mark.e2e
PY = sys.executable


def _own_files(project: Path) -> str:
    """A 200-row CSV and a parquet file in ``data/raw``, each with its own field names and integer (or
    float) answers (the README says an answer may be a plain number), and templated rows whose numbers
    differ (no leak); the params file of a set on them, relative to ``project``."""
    import pandas as pd

    # The labels need not be right: the pipeline's mechanics are under test, not what it learns.
    rows = [
        (f"Tom splits {7 * i + 3} coins among {i % 5 + 2} friends. How many coins are left?", i % 5) for i in range(200)
    ]
    pd.DataFrame({"input": [q for q, _ in rows], "output": [a for _, a in rows]}).to_csv(
        project / "data" / "raw" / "mine.csv", index=False
    )
    more = [
        (f"A shop sells {i + 10} pens at {i % 7 + 1} dollars each. What is the total?", float((i + 10) * (i % 7 + 1)))
        for i in range(150)
    ]
    pd.DataFrame({"problem_text": [q for q, _ in more], "result": [a for _, a in more]}).to_parquet(
        project / "data" / "raw" / "shop.parquet"
    )
    fields = (("mine.csv", "input", "output"), ("shop.parquet", "problem_text", "result"))
    sources = [
        {"kind": "file", "path": f"data/raw/{name}", "license": "CC0-1.0", "question_field": q, "answer_field": a}
        for name, q, a in fields
    ]
    (project / "params" / "mine.yaml").write_text(yaml.safe_dump({"data": {"sources": sources}}))
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run([*GIT, "commit", "-qm", "my data"], cwd=project, check=True)
    return "params/mine.yaml"


def test_a_smoke_run_on_your_own_files_runs_every_stage_and_leaves_the_workspace_as_it_was(project, run_env):
    params = _own_files(project)
    ran = run([PY, "-m", "flows.pipeline", "--params", params, "--smoke"], project, run_env, timeout=1800)
    assert ran.returncode == 0, ran
    for stage in (s.name for s in STAGES if not s.opt_in):
        assert f"{stage:>20}: ran in" in ran.stdout, stage
    assert f"smoke run of {params}: passed" in ran.stdout
    for output in ("dvc.lock", "models", "data/prepared", "mlflow.db"):
        assert not (project / output).exists(), output
    assert [p.name for p in (project / "metrics").iterdir()] == [".gitignore"]  # the tracked one alone
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True, check=True)
    assert status.stdout == ""
    # What the user opens afterwards stays, outside what git tracks, and the run says where.
    kept = project / ".grpoflow" / "smoke" / "mine"
    assert f"smoke results kept in {kept}" in ran.stdout
    assert (kept / "metrics" / "evaluate.json").is_file()
    page = (kept / "reports" / "run.html").read_text()  # its page, which links to no store the copy took along
    assert "could not be written" not in ran.stdout + ran.stderr and "http://" not in page
    # Every row of both files was read, none quarantined, and the templated siblings are no leak.
    report = (kept / "data" / "prepared" / "report.md").read_text()
    assert "Rows kept: 350 " in report and "Sources read: {'mine': 200, 'shop': 150}" in report, report
    assert "quarantined: 0" in report and "0 leaking train rows" in report, report
