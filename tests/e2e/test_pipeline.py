"""The real pipeline on the tiny default: Prefect (ephemeral server), DVC, MLflow (SQLite). The
whole pipeline run twice (ran, then cached) is in test_operations.py, through the served worker."""

from __future__ import annotations

import json
import sys

import pytest

from tests.e2e.conftest import SFT_BUILT, prefect_query, run

pytestmark = pytest.mark.e2e
PY = sys.executable


def test_leakage_gate_fails_the_flow_with_a_report(project, run_env):
    fixtures = "tests/fixtures/gsm8k"
    params = (project / "params" / "default.yaml").read_text()
    params = params.replace(
        "  sources:\n    - kind: synthetic\n",
        f"  sources:\n    - {{kind: file, path: {fixtures}/train.jsonl, license: MIT, name: gsm8k_train}}\n",
    )
    params = params.replace(
        "  benchmarks: []\n",
        f"  benchmarks:\n    - {{kind: file, path: {fixtures}/test.jsonl, license: MIT, name: gsm8k_test}}\n",
    )
    # Against a public benchmark, templated siblings count too (the fixture's leak is one: other numbers).
    params = params.replace("ngram_min_overlap: 0.8", "ngram_min_overlap: 0.5\n    numbers: ignore")
    (project / "params" / "gsm8k.yaml").write_text(params)
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(
        dvc_yaml.read_text().replace("params_file: params/default.yaml", "params_file: params/gsm8k.yaml")
    )
    result = run([PY, "-m", "flows.pipeline", "--params", "params/gsm8k.yaml"], project, run_env)
    assert result.returncode != 0
    assert "starting Prefect's temporary API server" in result.stdout  # said before the wait for it
    report = (project / "data" / "prepared" / "report.md").read_text()
    assert "FAILED" in report and "A train travels 270 miles" in report
    assert json.loads((project / "metrics" / "prepare.json").read_text())["leakage"]["leaking_train_rows"] >= 1
    # One query (each starts Prefect's temporary server): the artifacts' keys and prepare's attempts.
    keys, attempts = prefect_query(
        project,
        run_env,
        """
return ([a.key or '' for a in await c.read_artifacts()],
        [t.run_count for t in await c.read_task_runs() if t.name == 'prepare'])""",
    )
    assert "failed-prepare" in keys
    # A gate's verdict is not retried (the same data gives the same answer), and says why at once.
    assert attempts == [1]
    assert not (project / "data" / "verifier_validation").exists()  # nothing downstream ran


def test_editing_a_module_reruns_exactly_the_stages_that_import_it(smoke_sft, run_env):
    # dvc.yaml's code deps are each stage's import graph (tasks/stages.py): the loss is imported by
    # the RL stages only. (Every stage that imports a file re-runs on its edit: tests/unit/test_stages.py.)
    # The stages up to sft come reproduced (the session's shared copy): only grpo runs first.
    project, _ = smoke_sft
    assert run([PY, "-m", "dvc", "repro", "grpo"], project, run_env).returncode == 0
    losses = project / "grpoflow" / "rl" / "losses.py"
    losses.write_text(losses.read_text() + "\n# an edit\n")
    again = run([PY, "-m", "dvc", "repro", "grpo"], project, run_env)
    assert again.returncode == 0, again.stdout + again.stderr
    for stage in ("prepare", "validate_verifiers", "sft"):
        assert f"Stage '{stage}' didn't change" in again.stdout
    assert "Running stage 'grpo'" in again.stdout


def test_files_that_tools_write_beside_the_code_change_no_stage(smoke_sft, run_env):
    # On a user's machine every import writes __pycache__/ beside the module, into the folders that
    # stages depend on whole (verifiers, grpoflow/rollout, ...), and macOS's Finder a .DS_Store: DVC must
    # not see them (.dvcignore), or the next repro would run every stage downstream again.
    project, _ = smoke_sft
    compiled = run([PY, "-m", "compileall", "-q", "grpoflow", "verifiers", "tasks", "flows"], project, run_env)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert list((project / "verifiers" / "__pycache__").glob("*.pyc"))  # written, so the check below bites
    (project / "grpoflow" / "rollout" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    status = run([PY, "-m", "dvc", "status", *SFT_BUILT], project, run_env)
    assert status.returncode == 0 and "Data and pipelines are up to date." in status.stdout, status.stdout


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
    flow = run([PY, "-m", "flows.pipeline", "--params", "params/bad.yaml"], project, run_env, timeout=300)
    assert flow.returncode == 2 and "num_exmples" in flow.stderr
    # Overrides of a flow run are validated as strictly, before anything starts (every message:
    # tests/unit/test_flows_pipeline.py).
    flow = run([PY, "-m", "flows.pipeline", "--set", "rl.num_generatoins=4"], project, run_env, timeout=300)
    assert flow.returncode == 2 and "rl.num_generatoins: unknown key (did you mean 'num_generations'?)" in flow.stderr
    unknown = run([PY, "-m", "flows.pipeline", "--stages", "prepare", "trian"], project, run_env, timeout=120)
    assert (
        unknown.returncode == 2
        and "invalid choice: 'trian'" in unknown.stderr
        and "validate_verifiers" in unknown.stderr
    )
    assert not (project / "data" / "prepared").exists() and not (project / "mlflow.db").exists()
