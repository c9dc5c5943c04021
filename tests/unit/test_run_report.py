"""The run's page and headline, from the files the stages write."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

from flows import run_report
from flows.run_report import StageResult
from tasks.html_report import table
from tasks.stages import stage

EVALUATION = {
    "k": 4,
    "n_samples": 4,
    "models": {
        "grpo": {
            "test": {"pass@1": 0.5, "pass@1_se": 0.0625, "pass@4": 0.75, "pass@4_se": 0.05, "maj@4": 0.5},
            "heldout_loss_increase": 0.01,
            "forgetting_flagged": False,
            "humaneval": {"pass@1": 0.0625, "pass@4": 0.125, "examples": 164},
        },
        "sft": {"test": {"pass@1": 0.3125, "pass@4": 0.5, "maj@4": 0.25}, "heldout_loss_increase": 0.0},
    },
}


def test_the_headline_names_each_models_score_the_winner_and_the_step_time():
    paired = {"grpo_minus_sft": {"difference": 0.1875, "p_value": 0.03, "se": 0.05}}
    compare = {"winner_on_test_pass@1": "grpo", "paired": paired}
    head = run_report.headline(EVALUATION, compare, {"grpo": {"seconds_per_step": 1.25, "peak_memory_mb": 900.0}})
    assert head == {
        "start": "SFT",
        "test_pass@1": {"sft": 0.3125, "grpo": 0.5},
        "test_pass@1_se": {"sft": None, "grpo": 0.0625},
        "winner": "grpo",
        "seconds_per_step": {"grpo": 1.25},
        "peak_memory_mb": {"grpo": 900.0},
        "paired": paired,
    }
    assert list(head["test_pass@1"]) == ["sft", "grpo"]  # the reference first, whatever the file's order
    # each score with its standard error over prompts, where the evaluation has one
    assert (
        run_report.headline_text(head)
        == "Test pass@1: SFT 31.2%, GRPO 50.0% ± 6.2 (+18.8); winner: grpo; grpo 1.25 s/step."
    )
    shipped = run_report.headline(EVALUATION, None, {}, start="SmolLM2-135M-Instruct")
    assert run_report.headline_text(shipped).startswith("Test pass@1: SmolLM2-135M-Instruct 31.2%, GRPO 50.0%")
    assert run_report.headline_metrics(head) == {
        "test_pass_at_1/sft": 0.3125,
        "test_pass_at_1/grpo": 0.5,
        "seconds_per_step/grpo": 1.25,
        "peak_memory_mb/grpo": 900.0,
        "paired/grpo_minus_sft/difference": 0.1875,
        "paired/grpo_minus_sft/p_value": 0.03,
    }


def test_a_run_without_evaluation_says_so():
    head = run_report.headline(None, None, {})
    assert run_report.headline_text(head) == "Not evaluated in this run."
    assert run_report.headline_metrics(head) == {}


def test_the_page_shows_stages_gates_curves_and_evaluation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    history = Path(stage("grpo").option("history").path)
    history.parent.mkdir(parents=True)
    history.write_text("step,reward_mean,kl,val_accuracy\n0,0.2,0.0,0.3\n1,0.4,0.01,0.5\n")
    split = {"rollout": {"mean_s": 1.5, "share": 0.75}, "update": {"mean_s": 0.5, "share": 0.25}}
    split["old_logprobs"] = {"mean_s": 0.0, "share": 0.0}  # never entered in this run
    cleared = {"name": "reward_flat", "step": 39, "evidence": "0.410 -> 0.419", "cause": "c", "remedy": "r"}
    health = [cleared | {"status": "cleared", "cleared_by": 80}]
    grpo_metrics = {"seconds_per_step": 2.0, "phases": split, "health": health}
    Path(stage("grpo").option("metrics").path).write_text(json.dumps(grpo_metrics))
    Path(stage("evaluate").option("metrics").path).write_text(json.dumps(EVALUATION))
    rows = [
        StageResult("prepare", False, 0.5, {"passed": True, "failures": []}),
        StageResult("validate_verifiers", True, 3.0, {"passed": False, "failures": ["math.val: recall 0.9 < 0.99"]}),
        StageResult("grpo", True, 20.0, {}),
        StageResult("evaluate", True, 9.0, {}),
    ]
    # An earlier run's comparison is still in the workspace; this run has no compare stage.
    Path(stage("compare").option("metrics").path).write_text(json.dumps({"winner_on_test_pass@1": "ppo"}))
    head = run_report.write(rows, "grpoflow-pipeline-test")
    page = run_report.REPORT.read_text()
    assert head["test_pass@1"] == {"sft": 0.3125, "grpo": 0.5} and head["winner"] is None
    assert "cached by DVC" in page and "FAILED" in page and "math.val: recall 0.9 &lt; 0.99" in page
    assert page.count('src="data:image/png;base64,') == 1  # the curves, inline
    assert "<h2>GRPO vs PPO</h2>" not in page and "<script" not in page  # no compare stage: no empty section
    # A benchmark gets its own row (a code set: no maj@k); no reward model ran.
    assert "<td>humaneval</td>" in page and '<td class="num">6.2%</td>' in page  # shares in %
    assert "<th>maj@4</th>" in page and "pass@4 and maj@4 from 4 samples" in page
    assert '<td class="num">75.0% ± 5.0</td>' in page  # with the standard error over prompts, in points
    assert '<td class="num">164</td>' in page  # the set's prompts beside its scores
    assert "<h2>Reward model</h2>" not in page and "<h2>Ablation</h2>" not in page
    assert "<td>grpo</td><td>ran</td><td>20 s</td>" in page  # times in minutes and seconds
    # Health: a symptom that cleared says from which step, not as the run's verdict
    assert "<h2>Health</h2>" in page and "<td>reward_flat</td>" in page and "cleared by step 80" in page
    # Where the step time goes: per training stage, each phase's mean seconds and share.
    assert "Where the step time goes" in page
    assert '<td>grpo</td><td>rollout</td><td class="num">1.5</td><td class="num">75</td>' in page
    assert '<td>update</td><td class="num">0.5</td><td class="num">25</td>' in page
    assert "<td>old_logprobs</td>" not in page  # a phase that took no time is no row


def test_with_k_1_the_page_has_no_vote_of_one_sample(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evaluate = Path(stage("evaluate").option("metrics").path)
    evaluate.parent.mkdir(parents=True)
    one = {"pass@1": 0.25, "pass@1_se": 0.014, "examples": 1000}
    evaluation = {"k": 1, "n_samples": 1, "temperature": 0.7, "models": {"sft": {"test": one}, "grpo": {"test": one}}}
    evaluate.write_text(json.dumps(evaluation))
    run_report.write([StageResult("evaluate", True, 9.0, {})], "grpoflow-pipeline-test")
    page = run_report.REPORT.read_text()
    assert '<td class="num">25.0% ± 1.4</td>' in page
    assert "maj@" not in page and "pass@1 from 1 sample per prompt at temperature 0.7" in page


def test_the_page_shows_the_reward_model_where_it_ran(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rm = stage("reward_model")
    Path(rm.option("metrics").path).parent.mkdir(parents=True)
    Path(rm.option("metrics").path).write_text(
        json.dumps(
            {
                "heldout_accuracy": 0.976,
                "pairs": {"self_built": 2985, "heldout": 573},
                "margins": {"margin_mean": 1.5, "p50": 0.8, "pairs": 573},
            }
        )
    )
    run_report.write([StageResult("reward_model", True, 300.0, {})], "grpoflow-pipeline-test")
    page = run_report.REPORT.read_text()
    assert "No step timing in this run." in page  # no training stage
    assert '<td class="num">0.976</td>' in page and '<td class="num">2985</td>' in page


def test_tables_escape_text_and_align_numbers():
    html = table([{"name": "<b>", "value": 0.123456}])
    assert "<td>&lt;b&gt;</td>" in html and '<td class="num">0.1235</td>' in html


def test_the_page_says_which_set_commit_and_time_it_is_of():
    from datetime import datetime

    from grpoflow.provenance import git_commit

    line = run_report.provenance_line("params/default.yaml", datetime(2026, 12, 3, 5, 40, tzinfo=UTC))
    assert line.startswith(f"params/default.yaml at commit {git_commit()[0][:12]}") and line.endswith(
        "2026-12-03 05:40 UTC"
    )


def test_the_page_links_back_to_mlflow_and_prefect():
    line = run_report.links_line({"MLflow run": "http://127.0.0.1:5000/#/x?a=1&b=2", "Prefect flow run": ""})
    # Escaped, in a new tab (MLflow's artifact viewer frames the page), none when empty.
    assert (
        line == '<p><a href="http://127.0.0.1:5000/#/x?a=1&amp;b=2" target="_blank" rel="noopener">MLflow run</a></p>'
    )
    assert run_report.links_line(None) == ""


def test_the_page_gives_the_health_verdict_and_where_the_validation_curves_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cleared = {"name": "reward_flat", "step": 39, "evidence": "e", "cause": "c", "remedy": "r"}
    health = {
        "grpo": ([cleared | {"status": "cleared", "cleared_by": 80}], []),
        "ppo": ([cleared | {"name": "kl_rising_fast", "status": "standing"}], ["kl_rising_fast"]),
    }
    for algo, (verdict, standing) in health.items():
        history = Path(stage(algo).option("history").path)
        history.parent.mkdir(parents=True, exist_ok=True)
        history.write_text("step,reward_mean,kl,val_accuracy\n0,0.2,0.0,\n1,0.4,0.01,0.5\n")
        metrics = {"val_accuracy_start": 0.3125, "health": verdict, "health_symptoms": standing}
        Path(stage(algo).option("metrics").path).write_text(json.dumps(metrics))
    run_report.write([StageResult("grpo", True, 1.0), StageResult("ppo", True, 1.0)], "t")
    page = run_report.REPORT.read_text()
    assert (
        '<p class="bad" id="health-verdict">Verdict: grpo: health ok (cleared: reward_flat); '
        "ppo: health kl_rising_fast.</p>"
    ) in page
    assert (
        '<p class="muted" id="val-start">Validation accuracy at step 0, before training, is the '
        "reference's (SFT): grpo 31.2%, ppo 31.2%.</p>"
    ) in page
    # A set that starts from a shipped model names it where the curves start, as the headline does.
    smollm = str(Path(__file__).resolve().parents[2] / "params" / "smollm2-135m.yaml")
    run_report.write([StageResult("grpo", True, 1.0), StageResult("ppo", True, 1.0)], "t", params_file=smollm)
    assert "is the reference's (SmolLM2-135M-Instruct): grpo 31.2%" in run_report.REPORT.read_text()


def test_the_parent_run_draws_every_models_score_on_one_chart_named_by_model(tmp_path, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    from tasks.tracking import NOTE

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("run-report-test")
    head = run_report.headline(EVALUATION, {"winner_on_test_pass@1": "grpo"}, {}, start="SmolLM2-135M-Instruct")
    figure = run_report.comparison_figure(head)
    (ax,) = figure.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["SmolLM2-135M-Instruct", "GRPO"]
    assert [bar.get_height() for bar in ax.patches] == [31.25, 50.0] and ax.get_ylim()[0] == 0
    assert [t.get_text() for t in ax.texts] == ["31.2%", "50.0% (+18.8)"]  # the gain over the starting model
    with mlflow.start_run() as run:
        text = run_report.log_headline(head)
    client = MlflowClient(uri)
    got = client.get_run(run.info.run_id)
    images = [a.path for a in client.list_artifacts(run.info.run_id, "images")]
    assert images and all(run_report.COMPARISON_CHART in p for p in images), images
    assert got.data.metrics["test_pass_at_1/grpo"] == 0.5 and got.data.tags["winner"] == "grpo"
    assert got.data.tags[NOTE] == (
        f"{text}\n\nAll models on one chart: `test_pass_at_1_by_model` under Model metrics.\n\n"
        "The whole run on one page: `run.html` under Artifacts."
    )
    assert run_report.comparison_figure(run_report.headline(None, None, {})) is None
