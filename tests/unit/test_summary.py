"""What a run says when it ends: the headline with each model named and its gain, the stages' times in minutes
and seconds, the health verdict, and where to look next (flows/summary.py)."""

from __future__ import annotations

from pathlib import Path

from flows import summary, ui
from grpoflow.config import load_params, validate_params
from tasks.notes import clock

REPO = Path(__file__).resolve().parents[2]
EVALUATION = {
    "models": {
        "grpo": {"test": {"pass@1": 0.315, "pass@1_se": 0.021}},
        "sft": {"test": {"pass@1": 0.228, "pass@1_se": 0.019}},
        "ppo": {"test": {"pass@1": 0.322, "pass@1_se": 0.02}},
    }
}


def test_the_starting_model_is_named_by_what_it_is():
    assert summary.starting_model(load_params(REPO / "params" / "default.yaml")) == "SFT"
    assert summary.starting_model(load_params(REPO / "params" / "smollm2-135m.yaml")) == "SmolLM2-135M-Instruct"
    hub = validate_params({"model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}, "sft": {"enabled": False}})
    assert summary.starting_model(hub) == "Qwen2.5-0.5B-Instruct"


def test_times_read_as_minutes_and_seconds():
    assert [clock(s) for s in (7.4, 59.6, 83.4, 1379, 3725)] == [
        "7 s",
        "1 min 0 s",
        "1 min 23 s",
        "22 min 59 s",
        "1 h 02 min",
    ]


def test_the_summary_names_each_model_with_its_score_and_gain_and_says_where_to_look():
    where = {"Run page": "/abs/reports/run.html", "MLflow run": "http://127.0.0.1:5000/#/x", "Open it with": "make ui"}
    text = summary.summary(
        [("prepare", False, 1.2), ("sft", True, 95.0), ("grpo", True, 1379.0)],
        EVALUATION,
        "grpo: health ok",
        "SFT",
        where,
    )
    lines = text.strip("\n").splitlines()
    assert [line.strip() for line in lines[:4]] == [
        "prepare: cached in 1 s",
        "sft: ran in 1 min 35 s",
        "grpo: ran in 22 min 59 s",
        "in all: 24 min 35 s",
    ]
    lines = lines[5:]
    assert lines[0] == "Result (test pass@1 ± standard error):"
    assert lines[1].split() == ["SFT", "22.8%", "±", "1.9"]  # the starting model first, no gain over itself
    assert lines[2].split()[:6] == ["GRPO", "31.5%", "±", "2.1", "+8.7", "points"] and lines[2].endswith("over SFT")
    assert lines[3].split()[0] == "PPO" and "+9.4 points over SFT" in lines[3]
    assert lines[4] == "Health: grpo: health ok"
    assert lines[5:] == [
        "Run page: /abs/reports/run.html",
        "MLflow run: http://127.0.0.1:5000/#/x",
        "Open it with: make ui",
    ]
    assert "not evaluated" in summary.summary([], None, "", "SFT", {})


def test_make_ui_opens_on_the_set_that_ran_last_unless_told_another(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(summary, "LAST_RUN", tmp_path / "last_run.json")
    assert ui._experiment_name(None) is None  # nothing ran here yet
    summary.record_last_run("params/smollm2-135m.yaml", "3", "abc", "http://127.0.0.1:5000/#/experiments/3/runs/abc")
    assert ui._experiment_name(None) == load_params("params/smollm2-135m.yaml").mlflow_experiment
    assert ui._experiment_name("params/default.yaml") == load_params("params/default.yaml").mlflow_experiment
    monkeypatch.setenv("UI_PORT", "5001")
    assert summary.ui_command("params/smollm2-135m.yaml") == "make ui PARAMS=params/smollm2-135m.yaml UI_PORT=5001"
