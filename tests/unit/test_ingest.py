import json
from pathlib import Path

import pandas as pd
import pytest

from grpoflow.data.ingest import RawRow, gsm8k_final_answer, ingest, read_raw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOOD = {"question": "Ann has 2 cats and buys 1,000 more. How many?", "answer": "2+1000=1002\n#### 1,002"}


def reasons(rows, fmt="gsm8k"):
    got = ingest([RawRow(i + 1, r) for i, r in enumerate(rows)], fmt, source="s", source_file="f.jsonl", license="MIT")
    return got, [(q.line, q.reason.split(":")[0]) for q in got.rejected]


@pytest.mark.parametrize(
    "row, kind",
    [
        ({"answer": "#### 1"}, "missing_field"),
        ({"question": None, "answer": "#### 1"}, "missing_field"),
        ({"question": "   ", "answer": "#### 1"}, "empty_field"),
        ({"question": 12, "answer": "#### 1"}, "wrong_type"),
        ({"question": "q?", "answer": "no final line"}, "unparseable_answer"),
        ({"question": "q?", "answer": "#### twelve"}, "unparseable_answer"),
        (["not", "an", "object"], "wrong_type"),
    ],
)
def test_each_bad_row_kind_is_quarantined_with_line_and_reason(row, kind):
    got, found = reasons([GOOD, row])
    assert [r.id for r in got.records] == ["s-1"]
    assert found == [(2, kind)]
    assert got.rejected[0].source_file == "f.jsonl"


def test_duplicate_ids_name_the_first_line():
    got, found = reasons([{**GOOD, "id": "a"}, {**GOOD, "id": "b"}, {**GOOD, "id": "a"}])
    assert found == [(3, "duplicate_id")] and "line 1" in got.rejected[0].reason


def test_gsm8k_answers_lose_commas_and_keep_decimals():
    assert gsm8k_final_answer("x\n#### 1,002") == "1002"
    assert gsm8k_final_answer("#### -3.5") == "-3.5"
    assert gsm8k_final_answer("#### $18") == "18"
    assert gsm8k_final_answer("x <<2*3=6>>6\n#### 6") == "6"


def test_math_form_takes_the_last_boxed_with_nested_braces():
    row = {"problem": "Simplify.", "solution": "First \\boxed{1}, finally $\\boxed{\\frac{1}{2}}$."}
    got, found = reasons([row, {"problem": "p", "solution": "no box"}], fmt="math")
    assert got.records[0].reference_answer == "\\frac{1}{2}"
    assert found == [(2, "unparseable_answer")]


def test_invalid_json_lines_are_quarantined_not_fatal(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps(GOOD) + "\n{broken\n\n" + json.dumps(GOOD | {"id": "x"}) + "\n")
    got = ingest(read_raw(f), "gsm8k", source="d", source_file=str(f), license="MIT")
    assert len(got.records) == 2
    assert [(q.line, q.reason.split(":")[0]) for q in got.rejected] == [(2, "invalid_json")]


def test_csv_and_parquet_line_numbers(tmp_path):
    frame = pd.DataFrame([GOOD, {"question": "", "answer": "#### 1"}])
    frame.to_csv(tmp_path / "d.csv", index=False)
    frame.to_parquet(tmp_path / "d.parquet")
    csv = ingest(read_raw(tmp_path / "d.csv"), "gsm8k", source="c", source_file="d.csv", license="MIT")
    pq = ingest(read_raw(tmp_path / "d.parquet"), "gsm8k", source="p", source_file="d.parquet", license="MIT")
    assert csv.rejected[0].line == 3  # header is line 1
    assert pq.rejected[0].line == 2
    assert csv.rejected[0].reason.startswith("missing_field") and pq.rejected[0].reason.startswith("empty_field")


def test_missing_file_and_unknown_format_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(read_raw(tmp_path / "nope.jsonl"))
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(ValueError, match="unsupported format"):
        list(read_raw(tmp_path / "d.txt"))


def test_real_gsm8k_fixture_ingests_cleanly():
    got = ingest(read_raw(FIXTURES / "gsm8k" / "train.jsonl"), "gsm8k", source="gsm8k", source_file="t", license="MIT")
    assert len(got.records) == 202 and got.rejected == []
    assert got.records[0].reference_answer == "72"


def test_hub_source_offline_is_a_clear_error():
    import subprocess
    import sys

    code = (
        "from grpoflow.data.ingest import read_hub\n"
        "try:\n    list(read_hub('openai/gsm8k', 'main', 'train'))\n"
        "except FileNotFoundError as e:\n    print('CLEAR', e)\n"
    )
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "CLEAR dataset 'openai/gsm8k'" in out.stdout and "local file" in out.stdout
