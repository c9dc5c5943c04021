"""The run's page as a person sees it: Debian's headless Chromium renders reports/run.html, built
by the flow's own code from stage outputs, and every plot loads and the headline is on screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows import run_report
from flows.run_report import StageResult
from tasks.stages import stage
from tests.e2e.browser import rendered

pytestmark = pytest.mark.e2e


def _stage_outputs() -> None:
    """What the training, evaluate and compare stages leave in the workspace."""
    for algo, rewards in (("grpo", (0.25, 0.5, 0.75)), ("ppo", (0.25, 0.25, 0.5))):
        history = Path(stage(algo).option("history").path)
        history.parent.mkdir(parents=True, exist_ok=True)
        history.write_text(
            "step,reward_mean,kl,val_accuracy\n"
            + "".join(f"{i},{r},{0.01 * i},{r if i == 2 else ''}\n" for i, r in enumerate(rewards))
        )
        Path(stage(algo).option("metrics").path).write_text(json.dumps({"seconds_per_step": 1.5}))
    models = {
        m: {"test": {"pass@1": p, "pass@4": p, "maj@4": p}, "heldout_loss_increase": 0.0}
        for m, p in (("sft", 0.3125), ("grpo", 0.4375), ("ppo", 0.375))
    }
    Path(stage("evaluate").option("metrics").path).write_text(json.dumps({"k": 4, "models": models}))
    Path(stage("compare").option("metrics").path).write_text(json.dumps({"winner_on_test_pass@1": "grpo"}))
    table = Path(stage("compare").option("out").path) / "table.json"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(json.dumps([{"metric": "test_pass@1", "grpo": 0.4375, "ppo": 0.375}]))


def test_every_plot_loads_and_the_headline_numbers_are_on_screen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _stage_outputs()
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
    run_report.write(rows, "grpoflow-pipeline-test")
    page = rendered(run_report.REPORT.resolve())
    assert len(page["images"]) == 1 and all(image["loaded"] for image in page["images"]), page["images"]
    assert page["headline_height"] > 0
    assert (
        page["headline"]
        == "Test pass@1: sft 31.2%, grpo 43.8%, ppo 37.5%; winner: grpo; grpo 1.50 s/step, ppo 1.50 s/step."
    )
