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
    exp = client.get_experiment_by_name("grpoflow-default")  # experiment.name is kept by the smoke params
    return client, client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


STAGES = ("prepare", "validate_verifiers", "sft", "grpo", "ppo", "evaluate", "compare")


def test_flow_runs_stages_through_dvc_then_reuses_the_cache(smoke, run_env):
    project, params_file = smoke
    first = run([PY, "-m", "flows.pipeline", "--params", params_file], project, run_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert all(f"{stage}: ran" in first.stdout for stage in STAGES)
    metrics = json.loads((project / "metrics" / "prepare.json").read_text())
    rows = metrics["rows"]
    assert rows["train"] + rows["val"] + rows["test"] == rows["kept"] > 0
    assert (project / "dvc.lock").is_file()

    second = run([PY, "-m", "flows.pipeline", "--params", params_file], project, run_env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert all(f"{stage}: cached" in second.stdout for stage in STAGES)
    assert {"prepare-report", "validate-verifiers-report", "pipeline-stages", "mlflow-run"} <= prefect_artifact_keys(project, run_env)

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
    validation = [r for r in runs if r.data.tags.get("grpoflow.stage") == "validate_verifiers"]
    assert len(validation) == 2 and validation[0].data.metrics["verifiers.math.val.recall"] == 1.0
    assert validation[0].data.tags["verifier_hash"] == children[0].data.tags["verifier_hash"] != ""
    grpo = [r for r in runs if r.data.tags.get("grpoflow.stage") == "grpo"][0]
    assert grpo.data.tags["algorithm"] == "grpo" and grpo.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
    assert [m.step for m in client.get_metric_history(grpo.info.run_id, "reward_mean")] == [0, 1, 2, 3]
    grpo_metrics = json.loads((project / "metrics" / "grpo.json").read_text())
    assert grpo_metrics["steps"] == 4 and grpo_metrics["val_accuracy"] is not None
    assert (project / "models" / "grpo" / "model.safetensors").is_file()


def prefect_artifact_keys(project, env) -> set[str]:
    code = (
        "import asyncio\nfrom prefect.client.orchestration import get_client\n"
        "async def main():\n    async with get_client() as c:\n        print(' '.join(a.key or '' for a in await c.read_artifacts()))\n"
        "asyncio.run(main())"
    )
    out = run([PY, "-c", code], project, env, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_leakage_gate_fails_the_flow_with_a_report(project, run_env):
    fixtures = "tests/fixtures/gsm8k"
    params = (project / "params" / "default.yaml").read_text()
    params = params.replace("  sources:\n    - kind: synthetic\n",
                            f"  sources:\n    - {{kind: file, path: {fixtures}/train.jsonl, license: MIT, name: gsm8k_train}}\n")
    params = params.replace("  benchmarks: []\n", f"  benchmarks:\n    - {{kind: file, path: {fixtures}/test.jsonl, license: MIT, name: gsm8k_test}}\n")
    params = params.replace("ngram_min_overlap: 0.8", "ngram_min_overlap: 0.5")
    (project / "params" / "gsm8k.yaml").write_text(params)
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text().replace("params_file: params/default.yaml", "params_file: params/gsm8k.yaml"))
    result = run([PY, "-m", "flows.pipeline", "--params", "params/gsm8k.yaml"], project, run_env)
    assert result.returncode != 0
    report = (project / "data" / "prepared" / "report.md").read_text()
    assert "FAILED" in report and "A train travels 270 miles" in report
    assert json.loads((project / "metrics" / "prepare.json").read_text())["leakage"]["leaking_train_rows"] >= 1
    assert "failed-prepare" in prefect_artifact_keys(project, run_env)
    assert not (project / "data" / "verifier_validation").exists()  # nothing downstream ran


def test_editing_a_verifier_reruns_validation_and_training_not_preparation(smoke, run_env):
    project, _ = smoke
    assert run([PY, "-m", "dvc", "repro", "grpo"], project, run_env).returncode == 0
    fmt = project / "verifiers" / "format.py"
    fmt.write_text(fmt.read_text() + "\n# an edit\n")
    again = run([PY, "-m", "dvc", "repro", "grpo"], project, run_env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Stage 'prepare' didn't change" in again.stdout and "Stage 'sft' didn't change" in again.stdout
    assert "Running stage 'validate_verifiers'" in again.stdout and "Running stage 'grpo'" in again.stdout


def test_dvc_repro_alone_shares_the_cache_and_reacts_to_params(project, run_env):
    first = run([PY, "-m", "dvc", "repro", "validate_verifiers"], project, run_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Running stage 'prepare'" in first.stdout
    again = run([PY, "-m", "dvc", "repro", "validate_verifiers"], project, run_env)
    assert "didn't change, skipping" in again.stdout
    params = project / "params" / "default.yaml"
    params.write_text(params.read_text().replace("seed: 0", "seed: 1"))
    changed = run([PY, "-m", "dvc", "repro", "prepare"], project, run_env)
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
