"""A failed gate prints its report once, cut to a screen, with the path of the full report; the flow
ends Failed with one line and no traceback."""

import pytest

from flows import stage_run
from flows.stage_run import StageFailed, StageLog, StageVerdict, verdict_message, verdict_state
from grpoflow.data.prepare import Prepared
from grpoflow.data.records import Record, Rejected
from grpoflow.data.report import QUARANTINE_SHOWN, prepare_report
from tasks.cli import EXIT_VERDICT, MAX_REPORT_LINES, clipped_report, print_verdict

LONG = "# Verifier validation: FAILED\n\n- math.val: recall 0.5 < 0.99\n" + "\n".join(
    f"confusion {i}" for i in range(200)
)


def test_a_long_report_is_cut_to_a_screen_naming_the_full_one():
    text = clipped_report(LONG, "data/verifier_validation/report.md")
    lines = text.splitlines()
    assert len(lines) == MAX_REPORT_LINES and lines[:2] == [
        "# Verifier validation: FAILED",
        "- math.val: recall 0.5 < 0.99",
    ]
    assert lines[-1] == f"… {202 - (MAX_REPORT_LINES - 1)} more lines in data/verifier_validation/report.md"


def test_a_short_report_is_printed_whole():
    assert clipped_report("# ok\n\nall good\n", "r.md") == "# ok\nall good"


def test_a_failed_gate_prints_its_report_once_then_the_path_and_exits_3(capsys):
    with pytest.raises(SystemExit) as stop:
        print_verdict("validate_verifiers", LONG, "out/report.md", passed=False)
    out, err = capsys.readouterr()
    assert stop.value.code == EXIT_VERDICT
    assert out.count("# Verifier validation: FAILED") == 1 and len(out.splitlines()) <= MAX_REPORT_LINES
    assert err == "validate_verifiers: the gate failed; full report: out/report.md\n"


def test_a_passed_gate_prints_and_returns(capsys):
    print_verdict("prepare", "# Data preparation: PASSED\n", "out/report.md", passed=True)
    assert capsys.readouterr() == ("# Data preparation: PASSED\n", "")


def _log(code: int) -> StageLog:
    tail = [
        "Running stage 'prepare':",
        "# Data preparation: FAILED",
        "- source 'bad': 10 of 50 rows (20.0%) were quarantined",
        "prepare: the gate failed; full report: data/prepared/report.md",
        "ERROR: failed to reproduce 'prepare': failed to run: python -m tasks.prepare, exited with 3",
    ]
    return StageLog(code=1, stage_code=code, ran=True, tail=tail)


@pytest.fixture
def no_artifacts(monkeypatch):
    monkeypatch.setattr(stage_run, "create_markdown_artifact", lambda *a, **k: None)
    monkeypatch.setattr(stage_run.task_run, "get_run_count", lambda: 1, raising=False)


def test_a_verdict_fails_the_stage_with_one_line_not_the_report_again(no_artifacts, tmp_path):
    with pytest.raises(StageVerdict) as failed:
        stage_run._fail("prepare", _log(3), "# the report", report_paths=[tmp_path / "report.md"])
    message = str(failed.value)
    assert "\n" not in message and "# Data preparation" not in message
    assert message.startswith("stage 'prepare' failed with exit code 3: prepare: the gate failed; full report")
    assert str(tmp_path / "report.md") in message  # a report the stage's own line did not name is added


def test_an_unexpected_failure_keeps_the_log_tail(no_artifacts):
    with pytest.raises(StageFailed) as failed:
        stage_run._fail("prepare", _log(1))
    assert not isinstance(failed.value, StageVerdict) and "# Data preparation: FAILED" in str(failed.value)


def test_the_message_does_not_repeat_a_path_the_stage_named():
    log = _log(3)
    message = verdict_message("prepare", log, ["data/prepared/report.md"])  # type: ignore[list-item]
    assert message.count("data/prepared/report.md") == 1


def test_a_verdict_ends_the_flow_failed_with_its_message():
    state = verdict_state(StageVerdict("stage 'prepare' failed with exit code 3: the gate failed"))
    assert state.is_failed() and state.message == "stage 'prepare' failed with exit code 3: the gate failed"


def test_the_prepare_report_shows_the_first_quarantined_rows_with_file_line_and_reason():
    rejected = [Rejected("data/raw/mine.jsonl", i, "unparseable_answer: answer: x", {"answer": "x"}) for i in range(9)]
    record = Record("a", "q?", "1", "#### 1", "mine", "MIT")
    prepared = Prepared(splits={"train": [record], "val": [], "test": []}, quarantine=rejected, failures=["too many"])
    report = prepare_report(prepared)
    assert "| `data/raw/mine.jsonl` | 3 | unparseable_answer: answer: x |" in report
    assert report.count("| `data/raw/mine.jsonl` |") == QUARANTINE_SHOWN
    assert f"… and {9 - QUARANTINE_SHOWN} more" in report


def test_the_pipeline_flow_returns_a_verdict_as_its_failed_state_instead_of_raising(monkeypatch):
    import contextlib

    from flows import pipeline

    def gate_says_no(*args, **kwargs):
        raise StageVerdict("stage 'prepare' failed with exit code 3: prepare: the gate failed")

    monkeypatch.setattr(pipeline, "precheck", lambda *a: None)
    monkeypatch.setattr(pipeline, "held_workspace", lambda *a: contextlib.nullcontext(None))
    monkeypatch.setattr(pipeline, "run_stages", gate_says_no)
    state = pipeline.pipeline.fn("params/default.yaml", None, ["prepare"])
    assert state.is_failed() and state.message.endswith("prepare: the gate failed")


def test_the_pipeline_cli_ends_a_verdict_with_one_line_and_no_traceback(monkeypatch, capsys):
    import contextlib

    from flows import pipeline

    def gate_says_no(**kwargs):
        raise StageVerdict("stage 'prepare' failed with exit code 3: prepare: the gate failed")

    monkeypatch.setattr(pipeline, "precheck", lambda *a: None)
    monkeypatch.setattr(pipeline.serve, "prefect_api", contextlib.nullcontext)
    monkeypatch.setattr(pipeline, "pipeline", gate_says_no)
    assert pipeline.main(["--stages", "prepare"]) == 1
    assert capsys.readouterr().err == "error: stage 'prepare' failed with exit code 3: prepare: the gate failed\n"
