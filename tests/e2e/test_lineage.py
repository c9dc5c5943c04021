"""Lineage that never lies: a data file that changes during a run is never recorded as an input of a stage
that did not read it, in dvc.lock or in the saved DVC experiment; a file dropped in for another set is no
input of this one (prepare depends on its set's own files). The prepare stage runs for
real (``dvc repro`` through the flow's own stage task), without a Prefect server: its logger is a plain one."""

from __future__ import annotations

import logging

import pytest
import yaml

from flows import experiments, lineage, stage_run
from tasks.stages import stage as declared

pytestmark = pytest.mark.e2e


MINE = "data/raw/mine.jsonl"
ROW = '{{"question": "What is {i} + 1?", "answer": "{j}"}}\n'
REPORTS: list[str] = []  # the keys of the reports the stage task published


@pytest.fixture
def workspace(project, run_env, monkeypatch):
    """The project with a set of its own that reads data/raw/mine.jsonl, and dvc.yaml rendered for it."""
    from grpoflow.config import load_params
    from tasks.stages import for_params

    monkeypatch.chdir(project)
    for key, value in run_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(stage_run, "get_run_logger", lambda: logging.getLogger("test-lineage"))
    # Outside a flow run, Prefect would start a temporary server to store the stage's report (and warns
    # that artifacts outside a run are deprecated): the reports are kept here instead.
    REPORTS.clear()
    monkeypatch.setattr(stage_run, "create_markdown_artifact", lambda text, key, description: REPORTS.append(key))
    (project / MINE).write_text("".join(ROW.format(i=i, j=i + 1) for i in range(120)))
    text = (project / "params" / "default.yaml").read_text()
    text = text.replace(
        "  sources:\n    - kind: synthetic\n", f"  sources:\n    - {{kind: file, path: {MINE}, license: MIT}}\n"
    )
    (project / "params" / "mine.yaml").write_text(text)
    (project / "dvc.yaml").write_text(for_params("params/mine.yaml", load_params("params/mine.yaml")))
    return project


def _locked(project) -> set[str]:
    return set((yaml.safe_load((project / "dvc.lock").read_text()) or {}).get("stages") or {})


def _add_rows(project) -> None:
    """More rows in the set's file, as a user appending to it while the run goes."""
    with (project / MINE).open("a") as fh:
        fh.write("".join(ROW.format(i=i, j=i + 1) for i in range(500, 520)))


def test_rows_added_while_prepare_runs_fail_the_stage_and_leave_no_lock_entry(workspace, monkeypatch):
    real_stream = stage_run._stream

    def stream_then_add(*args, **kwargs):
        log = real_stream(*args, **kwargs)  # prepare ran and DVC wrote its lock entry: then the rows arrive
        _add_rows(workspace)
        return log

    monkeypatch.setattr(stage_run, "_stream", stream_then_add)
    with pytest.raises(lineage.InputsChanged) as caught:
        stage_run.run_dvc_stage.fn(declared("prepare"), {})
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{MINE} changed while stage 'prepare' ran")
    assert "prepare" not in _locked(workspace)  # the next run repeats it, on what is there then


def test_a_file_dropped_in_after_prepare_read_its_inputs_stops_the_experiment_being_saved(workspace):
    stage_run.run_dvc_stage.fn(declared("prepare"), {})
    assert "prepare" in _locked(workspace) and REPORTS == ["prepare-report"]
    # A file for another set, dropped into the data folder: not this set's input, so nothing to refuse.
    (workspace / "data" / "raw" / "other.jsonl").write_text('{"question": "q", "answer": "1"}\n')
    lineage.check_before_save(["prepare"])
    _add_rows(workspace)
    with pytest.raises(lineage.InputsChanged, match=rf"^{MINE} changed after stage 'prepare' read its inputs"):
        experiments.record("lineage-test", {}, ["prepare"])
    assert not (workspace / experiments.RUN_RECORD).exists()  # nothing of the run was written for the save
