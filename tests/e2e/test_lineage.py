"""Lineage that never lies: a file dropped into the data folder during a run is never recorded as an input
of a stage that did not read it, in dvc.lock or in the saved DVC experiment. The prepare stage runs for
real (``dvc repro`` through the flow's own stage task), without a Prefect server: its logger is a plain one."""

from __future__ import annotations

import logging

import pytest
import yaml

from flows import experiments, lineage, stage_run
from tasks.stages import stage as declared

pytestmark = pytest.mark.e2e


@pytest.fixture
def workspace(project, run_env, monkeypatch):
    monkeypatch.chdir(project)
    for key, value in run_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(stage_run, "get_run_logger", lambda: logging.getLogger("test-lineage"))
    return project


def _locked(project) -> set[str]:
    return set((yaml.safe_load((project / "dvc.lock").read_text()) or {}).get("stages") or {})


def test_a_file_dropped_in_while_prepare_runs_fails_the_stage_and_leaves_no_lock_entry(workspace, monkeypatch):
    real_stream = stage_run._stream

    def stream_then_drop(*args, **kwargs):
        log = real_stream(*args, **kwargs)  # prepare ran and DVC wrote its lock entry: then the file appears
        (workspace / "data" / "raw" / "late.jsonl").write_text('{"question": "q", "answer": "1"}\n')
        return log

    monkeypatch.setattr(stage_run, "_stream", stream_then_drop)
    with pytest.raises(lineage.InputsChanged) as caught:
        stage_run.run_dvc_stage.fn(declared("prepare"), {})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("data/raw/late.jsonl appeared while stage 'prepare' ran")
    assert "prepare" not in _locked(workspace)  # the next run repeats it, on what is there then


def test_a_file_dropped_in_after_prepare_read_its_inputs_stops_the_experiment_being_saved(workspace):
    stage_run.run_dvc_stage.fn(declared("prepare"), {})
    assert "prepare" in _locked(workspace)
    (workspace / "data" / "raw" / "late.jsonl").write_text('{"question": "q", "answer": "1"}\n')
    with pytest.raises(lineage.InputsChanged, match=r"^data/raw/late\.jsonl appeared after stage 'prepare' read"):
        experiments.record("lineage-test", {})
    assert not (workspace / experiments.RUN_RECORD).exists()  # nothing of the run was written for the save
    (workspace / "data" / "raw" / "late.jsonl").unlink()
    lineage.check_before_save(["prepare"])  # undone: the inputs are what prepare read again
