"""The run as a person sees it: Debian's headless Chromium renders reports/run.html, built by the
flow's own code from stage outputs, and the MLflow parent run it links back to, served as `make ui`
serves it: every plot loads, the headline, the health verdict and where the validation curves
start are on screen, and the link opens MLflow's training view of the run with its headline."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from flows import run_report
from flows.run_report import StageResult
from grpoflow.ports import free_port
from tasks.stages import stage
from tests.e2e.browser import mlflow_ui, rendered, visible_text
from tests.e2e.conftest import REPO

pytestmark = pytest.mark.e2e

TITLE = "grpoflow-pipeline-test"
HEADLINE = (
    "Test pass@1: SFT 31.2%, GRPO 43.8% (+12.5), PPO 37.5% (+6.2); winner: grpo; grpo 1.50 s/step, ppo 1.50 s/step."
)
REFERENCE = 0.3125  # the SFT reference's validation accuracy: where both training curves start


def _symptom(name: str, step: int, **status) -> dict:
    return {"name": name, "step": step, "evidence": "e", "cause": "c", "remedy": "r", **status}


def _stage_outputs() -> None:
    """What the training, evaluate and compare stages leave in the workspace: GRPO with a symptom
    that cleared, PPO with one that stands."""
    health = {
        "grpo": [_symptom("reward_flat", 1, status="cleared", cleared_by=2)],
        "ppo": [_symptom("kl_rising_fast", 1, status="standing")],
    }
    for algo, rewards in (("grpo", (0.25, 0.5, 0.75)), ("ppo", (0.25, 0.25, 0.5))):
        history = Path(stage(algo).option("history").path)
        history.parent.mkdir(parents=True, exist_ok=True)
        history.write_text(
            "step,reward_mean,kl,val_accuracy\n"
            + "".join(f"{i},{r},{0.01 * i},{r if i == 2 else ''}\n" for i, r in enumerate(rewards))
        )
        standing = [v["name"] for v in health[algo] if v["status"] == "standing"]
        metrics = {
            "seconds_per_step": 1.5,
            "val_accuracy_start": REFERENCE,
            "health": health[algo],
            "health_symptoms": standing,
        }
        Path(stage(algo).option("metrics").path).write_text(json.dumps(metrics))
    models = {
        m: {"test": {"pass@1": p, "pass@4": p, "maj@4": p}, "heldout_loss_increase": 0.0}
        for m, p in (("sft", 0.3125), ("grpo", 0.4375), ("ppo", 0.375))
    }
    Path(stage("evaluate").option("metrics").path).write_text(
        json.dumps({"k": 4, "n_samples": 4, "temperature": 0.7, "models": models})
    )
    Path(stage("compare").option("metrics").path).write_text(json.dumps({"winner_on_test_pass@1": "grpo"}))
    table = Path(stage("compare").option("out").path) / "table.json"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(json.dumps([{"metric": "test_pass@1", "grpo": 0.4375, "ppo": 0.375}]))


MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30}


class Finished(NamedTuple):
    """A finished run's workspace, its MLflow experiment and parent run, the console's closing
    summary, and the port the run's links name (``UI_PORT`` during the run)."""

    work: Path
    eid: str
    pid: str
    summary: str
    port: int


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Iterator[Finished]:
    """A finished run's workspace: the stages' outputs, and its MLflow parent run in the
    workspace's SQLite store, with the page, the headline and the closing summary as the flow
    makes them, run with ``UI_PORT`` set."""
    from flows import summary
    from flows.pipeline import publish_to_mlflow, run_links
    from grpoflow.config import load_params
    from tasks import tracking

    work, port = tmp_path_factory.mktemp("run"), free_port()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)  # the workspace's mlflow.db, as `make demo` has it
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.setenv("UI_PORT", str(port))
        _stage_outputs()
        params = load_params(str(REPO / "params" / "default.yaml"))
        rows = [
            StageResult(name, ran, 1.0, {})
            for name, ran in (
                ("prepare", False),
                ("sft", False),
                ("grpo", True),
                ("ppo", True),
                ("evaluate", True),
                ("compare", True),
            )
        ]
        # The saved starting model's config and size, as the sft stage leaves them: the parent names the model that ran.
        config = Path(stage("sft").option("out").path) / "config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(MODEL_CONFIG))
        Path(stage("sft").option("metrics").path).write_text(json.dumps({"parameters": 1234567}))
        with tracking.pipeline_run(params, "params/default.yaml", TITLE, "none") as parent:
            eid, pid = parent.info.experiment_id, parent.info.run_id
            publish_to_mlflow(rows, TITLE, eid, pid, "params/default.yaml", run_links(eid, pid, ""))
        closing = summary.run_summary(rows, params, "params/default.yaml")
        yield Finished(work, eid, pid, closing, port)


def _mlflow_href(page: dict) -> str:
    (href,) = [link["href"] for link in page["links"] if link["text"] == "MLflow parent run"]
    return href


def _said(summary: str, label: str) -> str:
    """What the closing summary's line ``label: ...`` says."""
    (value,) = [line.split(": ", 1)[1] for line in summary.splitlines() if line.startswith(f"{label}: ")]
    return value


def test_every_plot_loads_and_the_headline_health_and_curve_start_are_on_screen(finished):
    work, eid, pid = finished.work, finished.eid, finished.pid
    page = rendered((work / run_report.REPORT).resolve())
    assert len(page["images"]) == 1 and all(image["loaded"] for image in page["images"]), page["images"]
    assert page["headline_height"] > 0
    assert page["headline"] == HEADLINE
    assert "Health" in page["headings"]
    # The final verdict: GRPO's symptom cleared and does not stand; PPO's stands.
    assert page["shown"]["health-verdict"] == (
        "Verdict: grpo: health ok (cleared: reward_flat); ppo: health kl_rising_fast."
    )
    # The curves are drawn from the same starting scores the caption shows (tasks.plots draws
    # them at step 0; tests/unit/test_plots.py reads the drawn line back).
    assert page["shown"]["val-start"] == (
        "Validation accuracy at step 0, before training, is the reference's (SFT): grpo 31.2%, ppo 31.2%."
    )
    link = f"http://127.0.0.1:{finished.port}/#/experiments/{eid}/runs/{pid}?workflowType=machine_learning"
    assert _mlflow_href(page) == link


def test_the_closing_summary_names_the_page_that_opens_and_the_ui_command_for_its_port(finished):
    # The console's last lines, read as a user copies them: the page's absolute path opens in a browser
    # with the run's headline; the command serves the port the MLflow link names (its run: the next test).
    page = Path(_said(finished.summary, "Run page"))
    assert page.is_absolute() and page == (finished.work / run_report.REPORT).resolve()
    assert rendered(page)["headline"] == HEADLINE
    assert _said(finished.summary, "Open it with") == f"make ui PARAMS=params/default.yaml UI_PORT={finished.port}"
    assert _said(finished.summary, "MLflow run").startswith(f"http://127.0.0.1:{finished.port}/#/")
    assert "Result (test pass@1 ± standard error):" in finished.summary
    assert "+12.5 points over SFT" in finished.summary, finished.summary


def test_the_link_back_opens_mlflows_training_view_of_the_run_with_its_headline_and_one_comparison_chart(finished):
    work, eid, pid = finished.work, finished.eid, finished.pid
    href = _mlflow_href(rendered((work / run_report.REPORT).resolve()))
    # The page and the console's summary link the same run, on the port `make ui` serves.
    assert _said(finished.summary, "MLflow run") == href
    metrics = ["test_pass_at_1/sft", "test_pass_at_1/grpo", "test_pass_at_1/ppo"]
    # Served on a port free now (the run's may have been taken since): the host is this server's, the path the page's.
    with mlflow_ui(work / "mlflow.db", free_port()) as base:
        text = visible_text(href.replace(f"http://127.0.0.1:{finished.port}", base), until=[HEADLINE, *metrics])
        # Every model's score on one chart (tasks.plots.comparison_figure: by name, from 0), among the run's.
        charts_url = f"{base}/#/experiments/{eid}/runs/{pid}/model-metrics"
        charts = visible_text(charts_url, until=[run_report.COMPARISON_CHART], height=3000)
    assert run_report.COMPARISON_CHART in charts, charts[:3000]
    # The parent names the model that ran (read from its saved config), not the schema's tiny defaults.
    for name, value in (("resolved_model.arch", "LlamaForCausalLM"), ("resolved_model.vocab_size", "49152")):
        assert name in text and value in text, text[:3000]
    assert TITLE in text and HEADLINE in text, text[:3000]  # the run, and its description
    # MLflow's usage-data notice is its home page's alone (the server's telemetry is off): no link opens there.
    assert "collects usage data" not in text + charts
    assert all(name in text for name in metrics), text[:3000]
    # The model-training view's sidebar (its runs and registry), not the GenAI one's evaluation runs.
    assert "Model registry" in text and "Evaluation runs" not in text, text[:3000]
