"""What a flow run is given: overrides parsed and validated, and the edits that make DVC see them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from flows.dag import pipeline_params_file
from flows.pipeline import _check_params_file, parse_overrides, run_edits
from grpoflow.config import ConfigError, load_params

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_overrides_parse_as_yaml_values():
    assert parse_overrides(["grpo.steps=20", "grpo.beta=0.02", "grpo.rollout_engine=vllm", "data.synthetic.ops=['+']",
                            "orchestration.dvc_remote=null"]) == {
        "grpo.steps": 20, "grpo.beta": 0.02, "grpo.rollout_engine": "vllm", "data.synthetic.ops": ["+"],
        "orchestration.dvc_remote": None}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_overrides(["grpo.steps"])


def test_bad_overrides_and_stages_fail_naming_them(project):
    with pytest.raises(ConfigError, match=r"(?s)grpo.num_generations: Input should be greater than or equal to 2.*overrides"):
        _check_params_file("params/default.yaml", {"grpo.num_generations": 1})
    with pytest.raises(ConfigError, match=r"grpo.num_generatoins: unknown key \(did you mean 'num_generations'\?\)"):
        _check_params_file("params/default.yaml", {"grpo.num_generatoins": 4})
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['trian'\]"):
        _check_params_file("params/default.yaml", None, ["trian"])
    with pytest.raises(ConfigError, match="params file not found"):
        _check_params_file("params/nope.yaml")


def test_a_missing_model_fails_before_any_stage(project, monkeypatch):
    with pytest.raises(ConfigError, match=r"model.name_or_path: model path './models/nope' does not exist"):
        _check_params_file("params/default.yaml", {"model.name_or_path": "./models/nope"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(project / "empty-hf-home"))
    with pytest.raises(ConfigError, match=r"'Qwen/Qwen2.5-0.5B-Instruct' is not in the local Hugging Face cache"):
        _check_params_file("params/gsm8k-qwen2.5-0.5b.yaml")


def test_no_edits_for_the_wired_set_without_overrides(project):
    assert run_edits("params/default.yaml", None) == {}


def test_edits_point_dvc_at_another_set_and_carry_the_overrides(project):
    edits = run_edits("params/gsm8k-qwen2.5-0.5b.yaml", {"grpo.steps": 7})
    (project / "dvc.yaml").write_text(edits["dvc.yaml"])
    assert pipeline_params_file("dvc.yaml") == "params/gsm8k-qwen2.5-0.5b.yaml"
    assert edits["dvc.yaml"].count("params/gsm8k-qwen2.5-0.5b.yaml") == 1  # only the var changed
    (project / "params" / "gsm8k-qwen2.5-0.5b.yaml").write_text(edits["params/gsm8k-qwen2.5-0.5b.yaml"])
    params = load_params("params/gsm8k-qwen2.5-0.5b.yaml")
    assert params.grpo.steps == 7 and params.grpo.rollout_engine == "vllm"
    assert yaml.safe_load(edits["params/gsm8k-qwen2.5-0.5b.yaml"])["grpo"]["steps"] == 7


def test_the_mlflow_link_points_at_the_tracking_server_in_use(monkeypatch):
    from flows.pipeline import _mlflow_link

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example.org/")
    assert _mlflow_link("3", "abc") == "https://mlflow.example.org/#/experiments/3/runs/abc"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert _mlflow_link("3", "abc") == "http://127.0.0.1:5000/#/experiments/3/runs/abc"  # make ui over mlflow.db
