import json
from pathlib import Path

import pytest

from grpoflow.config import load_params, validate_params
from grpoflow.data.prepare import prepare
from grpoflow.data.report import prepare_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k"


def data_cfg(**data):
    return validate_params({"data": data}).data


def gsm8k_cfg(**extra):
    return data_cfg(
        sources=[{"kind": "file", "path": str(FIXTURES / "train.jsonl"), "license": "MIT", "name": "gsm8k_train"}],
        benchmarks=[{"kind": "file", "path": str(FIXTURES / "test.jsonl"), "license": "MIT", "name": "gsm8k_test"}],
        **extra,
    )


def test_real_gsm8k_slice_leak_is_found_and_fails_the_gate():
    result = prepare(0, gsm8k_cfg())
    pairs = {(f.train.prompt[:22], f.reference.prompt[:22], f.reference_set) for f in result.leaks}
    assert ("A train travels 270 mi", "A plane travels 1200 m", "gsm8k_test") in pairs
    assert result.failures and "leakage gate" in result.failures[0]
    summary = result.summary()
    assert summary["passed"] is False and summary["licenses"] == {"MIT": 202 + 101}  # train file + benchmark rows
    report = prepare_report(result)
    assert "FAILED" in report and "A train travels 270 miles" in report and "A plane travels 1200" in report


def test_drop_mode_moves_leaking_rows_to_quarantine_with_reason():
    result = prepare(0, gsm8k_cfg(leakage={"action": "drop"}))
    assert result.failures == []
    dropped = [q for q in result.quarantine if q.reason.startswith("leak_")]
    assert dropped and all("gsm8k_test" in q.reason for q in dropped)
    kept_ids = {r.id for rows in result.splits.values() for r in rows}
    assert not kept_ids & {q.row["id"] for q in dropped}


def test_leak_tolerance_max_leaks():
    n = len({f.train.id for f in prepare(0, gsm8k_cfg()).leaks})
    assert prepare(0, gsm8k_cfg(leakage={"max_leaks": n})).failures == []


def test_rejected_share_gate_names_the_source(tmp_path):
    bad = tmp_path / "bad.jsonl"
    rows = [{"question": f"q{i}?", "answer": f"#### {i}"} for i in range(8)] + [{"question": "q?"}] * 2
    bad.write_text("\n".join(json.dumps(r) for r in rows))
    result = prepare(0, data_cfg(sources=[{"kind": "file", "path": str(bad), "license": "MIT"}], max_rejected_fraction=0.1))
    assert any("'bad'" in f and "2 of 10" in f for f in result.failures)
    assert [(q.source_file, q.line) for q in result.quarantine if q.reason.startswith("missing_field")] == [(str(bad), 9), (str(bad), 10)]


def test_all_invalid_and_empty_sources_fail(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = prepare(0, data_cfg(sources=[{"kind": "file", "path": str(empty), "license": "MIT"}]))
    assert any("no rows read" in f for f in result.failures)


def test_duplicates_across_sources_are_quarantined_naming_the_first(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"question": "How many apples, Tom?", "answer": "#### 3"}) + "\n")
    b.write_text(json.dumps({"question": "how many APPLES tom", "answer": "#### 3"}) + "\n")
    src = [{"kind": "file", "path": str(p), "license": "MIT"} for p in (a, b)]
    result = prepare(0, data_cfg(sources=src, max_rejected_fraction=1.0))
    dupes = [q for q in result.quarantine if q.reason.startswith("duplicate_prompt")]
    assert len(dupes) == 1 and "a-1" in dupes[0].reason and dupes[0].source_file == str(b) and dupes[0].line == 1


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        prepare(0, data_cfg(sources=[{"kind": "file", "path": str(tmp_path / "nope.jsonl"), "license": "MIT"}]))


def test_default_synthetic_data_passes_both_gates():
    params = load_params(Path(__file__).resolve().parents[2] / "params" / "default.yaml")
    result = prepare(params.experiment.seed, params.data)
    assert result.failures == [] and result.leaks == []
    assert result.summary()["quarantine_reasons"] == {"duplicate_prompt": len(result.quarantine)}
