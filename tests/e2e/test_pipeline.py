"""The real pipeline on the tiny default: Prefect (ephemeral server), DVC, MLflow (SQLite)."""

from __future__ import annotations

import json
import sys

import pytest
from mlflow.tracking import MlflowClient

from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable


def runs_by_name(project):
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("grpoflow-default")
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


def test_flow_runs_stages_through_dvc_then_reuses_the_cache(project, run_env):
    first = run([PY, "-m", "flows.pipeline", "--params", "params/default.yaml"], project, run_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "prepare: ran" in first.stdout
    metrics = json.loads((project / "metrics" / "prepare.json").read_text())
    rows = metrics["rows"]
    assert rows["train"] + rows["val"] + rows["test"] == rows["kept"] > 0
    assert (project / "dvc.lock").is_file()

    second = run([PY, "-m", "flows.pipeline"], project, run_env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "prepare: cached" in second.stdout

    client, runs = runs_by_name(project)
    parents = [r for r in runs if r.data.tags.get("grpoflow.stage") == "pipeline"]
    children = [r for r in runs if r.data.tags.get("grpoflow.stage") == "prepare"]
    assert len(parents) == 2 and len(children) == 2
    for parent, child in zip(parents, children):
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["git_commit"] == parent.data.tags["git_commit"] != "unknown"
        assert child.data.params["experiment.seed"] == "0"
        assert child.data.metrics["rows.train"] == rows["train"]
        assert child.data.tags["prefect_flow_run_id"] not in ("", "none")
    assert children[0].data.tags["data_hash"] == metrics["data_hash"]
    assert children[1].data.tags.get("dvc_cached") == "true"


def test_dvc_repro_alone_shares_the_cache_and_reacts_to_params(project, run_env):
    first = run([PY, "-m", "dvc", "repro"], project, run_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Running stage 'prepare'" in first.stdout
    again = run([PY, "-m", "dvc", "repro"], project, run_env)
    assert "didn't change, skipping" in again.stdout
    params = project / "params" / "default.yaml"
    params.write_text(params.read_text().replace("seed: 0", "seed: 1"))
    changed = run([PY, "-m", "dvc", "repro"], project, run_env)
    assert "Running stage 'prepare'" in changed.stdout
    assert json.loads((project / "metrics" / "prepare.json").read_text())["seed"] == 1


def test_bad_params_fail_fast_naming_the_key_and_write_nothing(project, run_env):
    bad = project / "params" / "bad.yaml"
    bad.write_text("data:\n  synthetic:\n    num_exmples: 10\n")
    stage = run([PY, "-m", "tasks.prepare", "--params", "params/bad.yaml"], project, run_env)
    assert stage.returncode == 2
    assert "params/bad.yaml" in stage.stderr and "data.synthetic.num_exmples: unknown key" in stage.stderr
    assert "num_examples" in stage.stderr  # the suggestion
    assert not (project / "data" / "prepared").exists()
    flow = run([PY, "-m", "flows.pipeline", "--params", "params/bad.yaml"], project, run_env, timeout=60)
    assert flow.returncode == 2 and "num_exmples" in flow.stderr
