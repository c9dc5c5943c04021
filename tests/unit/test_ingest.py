import base64
import datetime
import gzip
import json
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.data.ingest import RawRow, RowError, gsm8k_final_answer, ingest, read_raw
from grpoflow.data.records import Rejected

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


@pytest.mark.parametrize(
    "row, reason",
    [
        (  # empty on screen, so empty: it was kept as a prompt of one zero-width space
            {"question": "  \u200b ", "answer": "#### 1"},
            "empty_field: question holds only characters a reader cannot see (U+200B ZERO WIDTH SPACE at character 3)",
        ),
        (  # shows as 168: "not a plain number" alone read as a wrong verdict
            {"question": "q?", "answer": "168\u200b"},
            "unparseable_answer: answer: not a plain number, and no '#### <number>' final line or \\boxed{...} "
            "(it holds U+200B ZERO WIDTH SPACE at character 4, which a reader cannot see)",
        ),
        (
            {"question\u200b": "q?", "answer": "#### 1"},
            "missing_field: question (the row has 'question\\u200b' (U+200B ZERO WIDTH SPACE at character 9): "
            "a field's name must match exactly)",
        ),
        (
            {"Question": "q?", "answer": "#### 1"},
            "missing_field: question (the row has 'Question': a field's name must match exactly)",
        ),
    ],
)
def test_what_a_reader_cannot_see_is_named_in_the_reason(row, reason):
    got, _ = reasons([GOOD, row])
    assert [q.reason for q in got.rejected] == [reason]


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
    assert csv.rejected[0].line == 4  # header is line 1; GOOD's answer spans lines 2-3
    assert pq.rejected[0].line == 2
    assert csv.rejected[0].reason.startswith("missing_field") and pq.rejected[0].reason.startswith("empty_field")


def test_answers_that_are_numbers_are_read_as_plain_numbers(tmp_path):
    # A parquet or JSON column of answers is numeric: the README says an answer may be a plain number.
    frame = pd.DataFrame({"question": ["a?", "b?", "c?"], "answer": [18, -3.5, 7.0]})
    frame.to_parquet(tmp_path / "d.parquet")
    got = ingest(read_raw(tmp_path / "d.parquet"), "gsm8k", source="p", source_file="d.parquet", license="MIT")
    assert [r.reference_answer for r in got.records] == ["18", "-3.5", "7"] and got.rejected == []
    assert [r.solution for r in got.records] == ["#### 18", "#### -3.5", "#### 7"]
    rows = [{"question": "q", "answer": v} for v in (12, 0.25, True, float("nan"), [1])]
    f = tmp_path / "d.jsonl"
    f.write_text(
        "\n".join(json.dumps(r) for r in rows[:3]) + '\n{"question": "q", "answer": NaN}\n' + json.dumps(rows[4])
    )
    got = ingest(read_raw(f), "gsm8k", source="d", source_file=str(f), license="MIT")
    assert [r.reference_answer for r in got.records] == ["12", "0.25"]
    assert [(q.line, q.reason) for q in got.rejected] == [
        (3, "wrong_type: answer is bool, expected a number or text"),
        (4, "not_a_number: NaN is not a JSON number (RFC 8259): write the value, or leave the row out"),
        (5, "wrong_type: answer is list, expected a number or text"),
    ]


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


# --- hostile and careless input (each a row's problem, never the file's) ---------------------------


def ingest_file(path, **read):
    return ingest(read_raw(path, **read), "gsm8k", source="d", source_file=str(path), license="MIT")


def kinds(got):
    return [(q.line, q.reason.split(":")[0]) for q in got.rejected]


def _refuse(constant):
    raise ValueError(f"not strict JSON: {constant}")


def strict_loads(text):
    """json.loads that refuses NaN/Infinity, which RFC 8259 does not allow."""
    return json.loads(text, parse_constant=_refuse)


def jsonl(row):
    return (json.dumps(row) + "\n").encode()


@pytest.mark.parametrize(
    "line, kind",
    [
        (b'{"question": "q?", "answer": "#### 1", "extra": ' + b"9" * 5000 + b"}", "number_too_large"),
        (b"[" * 100_000, "too_deeply_nested"),
        (b'{"question": "caf\xe9?", "answer": "#### 1"}', "invalid_utf8"),
        (b'{"question": "q\\u0000?", "answer": "#### 1"}', "control_character"),
        (b'{"question": "q\\ud800?", "answer": "#### 1"}', "invalid_unicode"),
        # a field given twice: JSON parsers keep the last one silently (the hostile review's item 8)
        (b'{"question": "q?", "answer": "#### 1", "answer": "#### 2"}', "duplicate_key"),
        (b'{"question": "q?", "answer": "#### 1", "weight": NaN}', "not_a_number"),
        (b'{"question": "q?", "answer": "#### 1", "weight": -Infinity}', "not_a_number"),
    ],
)
def test_a_hostile_jsonl_line_is_one_quarantined_row(tmp_path, line, kind):
    f = tmp_path / "d.jsonl"
    f.write_bytes(jsonl(GOOD) + line + b"\n" + jsonl(GOOD | {"id": "x"}))
    got = ingest_file(f)
    assert len(got.records) == 2 and kinds(got) == [(2, kind)]
    strict_loads(json.dumps(got.rejected[0].to_dict(), ensure_ascii=False, allow_nan=False))


@pytest.mark.parametrize(
    "content, found", [("42", "a number"), ('{"question": "q?"}', "an object"), ("", "an empty file")]
)
def test_a_json_file_that_is_not_a_list_is_one_clear_error(tmp_path, content, found):
    f = tmp_path / "d.json"
    f.write_text(content)
    with pytest.raises(ValueError, match=f"{f}.*list of row objects, found {found}"):
        list(read_raw(f))


def test_bad_elements_of_a_json_list_are_quarantined_and_the_rest_read(tmp_path):
    elements = [
        jsonl(GOOD).strip(),
        b'{"question": "q?", "answer": ' + b"9" * 5000 + b"}",
        b"[" * 5000 + b"]" * 5000,
        b'{"question": "q?" "answer": "#### 1"}',
        b'{"question": "\xff?", "answer": "#### 1"}',
        jsonl(GOOD | {"id": "z"}).strip(),
    ]
    f = tmp_path / "d.json"
    f.write_bytes(b"[\n" + b",\n".join(elements) + b"\n]\n")
    got = ingest_file(f)
    assert [r.id for r in got.records] == ["d-1", "z"]
    assert kinds(got) == [(2, "number_too_large"), (3, "too_deeply_nested"), (4, "invalid_json"), (5, "invalid_utf8")]
    assert got.rejected[2].row["raw"] == '{"question": "q?" "answer": "#### 1"}'


def test_a_json_list_that_never_ends_is_one_clear_error(tmp_path):
    f = tmp_path / "d.json"
    f.write_text("[" + json.dumps(GOOD) + ', {"question": ')
    with pytest.raises(ValueError, match=f"{f}: list element 2 .* never ends"):
        list(read_raw(f))


def test_parquet_with_list_bytes_and_nan_columns(tmp_path):
    table = pa.table(
        {
            "question": ["q1?", "q2?", None],
            "answer": ["#### 1", "#### 2", "#### 3"],
            "tags": [[1, 2], [], [3, 4]],
            "blob": [b"\x00\xff", b"", b"\xfe" * 5000],
            "score": [0.5, float("nan"), float("nan")],  # a stored NaN, not a null (pandas would write null)
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    got = ingest_file(tmp_path / "d.parquet")
    assert [r.prompt for r in got.records] == ["q1?", "q2?"] and kinds(got) == [(3, "missing_field")]
    line = strict_loads(json.dumps(got.rejected[0].to_dict(), allow_nan=False))
    assert line["row"]["tags"] == [3, 4] and line["row"]["score"] is None
    assert line["row"]["blob"] == {"$bytes_b64": base64.b64encode(b"\xfe" * 1500).decode(), "$bytes_len": 5000}
    assert any(n.startswith("row.score: nan") for n in line["notes"])


def test_an_unreadable_parquet_file_is_one_clear_error(tmp_path):
    f = tmp_path / "d.parquet"
    f.write_bytes(b"PAR1 not really parquet")
    with pytest.raises(ValueError, match=f"{f}: not a readable Parquet file"):
        list(read_raw(f))


def test_csv_rows_report_the_file_line_they_start_on(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text('question,answer\n"Line one\nline two?","a\n#### 1"\n\nq3?,#### 3\nq4?\n,#### 8\nq9?,#### 9\n')
    got = ingest_file(f)
    assert [(r.prompt, r.id) for r in got.records] == [("Line one\nline two?", "d-2"), ("q3?", "d-6"), ("q9?", "d-9")]
    assert kinds(got) == [(7, "malformed_csv"), (8, "missing_field")]
    assert got.rejected[0].row == {"raw": "q4?", "raw_bytes": 3}


def test_csv_bad_bytes_and_an_over_long_line_are_rows_not_the_file(tmp_path):
    f = tmp_path / "d.csv"
    long_field = b'"' + b"x" * 3000 + b"\n" + b"x" * 10 + b'"'  # opens a quote on line 4, closes it on line 5
    f.write_bytes(b'question,answer\nq1?,#### 1\n"caf\xe9?",#### 2\n' + long_field + b",#### 3\nq6?,#### 6\n")
    got = ingest_file(f, max_row_bytes=1024)
    assert [r.prompt for r in got.records] == ["q1?", "q6?"]
    assert kinds(got) == [(3, "invalid_utf8"), (4, "row_too_long")]
    assert got.rejected[1].row["raw_bytes"] == 3001 + 1 + 18


@pytest.mark.parametrize(
    "prompt, kind",
    [
        ("a\x00b?", "control_character"),
        ("esc \x1b[31m?", "control_character"),
        ("lone \ud800?", "invalid_unicode"),
        ("x" * 8001, "prompt_too_long"),
    ],
)
def test_control_characters_and_long_prompts_are_quarantined(prompt, kind):
    got, found = reasons([GOOD, {"question": prompt, "answer": "#### 1"}])
    assert found == [(2, kind)]
    json.dumps(got.rejected[0].to_dict(), ensure_ascii=False).encode("utf-8")  # no lone surrogate left


def test_tab_newline_and_a_prompt_of_exactly_the_limit_are_accepted():
    got, found = reasons([{"question": "a\tb\nc?", "answer": "#### 1"}, {"question": "y" * 8000, "answer": "#### 2"}])
    assert found == [] and len(got.records) == 2


@pytest.mark.parametrize("rid", [[1], {"a": 1}, 1.5, True, "x" * 201, "a\x00b"])
def test_ids_that_are_not_short_plain_text_are_quarantined(rid):
    assert reasons([GOOD | {"id": rid}])[1] == [(1, "invalid_id")]


def test_a_huge_line_is_read_in_blocks_and_kept_only_in_part(tmp_path):
    f = tmp_path / "d.jsonl"
    huge = b'{"question": "' + b"x" * (32 << 20) + b'", "answer": "#### 1"}'
    f.write_bytes(jsonl(GOOD) + huge + b"\n" + jsonl(GOOD | {"id": "z"}))
    size = len(huge)
    del huge
    tracemalloc.start()
    try:
        got = ingest_file(f, max_row_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kinds(got) == [(2, "row_too_long")] and len(got.records) == 2
    assert peak < 8 << 20  # the 32 MiB line is never held whole (the old reader held several copies)
    row = got.rejected[0].to_dict()["row"]
    assert row["raw"] == '{"question": "' + "x" * 1986 and row["raw_bytes"] == size


def test_an_invalid_json_line_keeps_its_text(tmp_path):
    f = tmp_path / "d.jsonl"
    long_bad = '{"question": "' + "y" * 5000 + '"'
    f.write_text(json.dumps(GOOD) + "\n{broken\n" + long_bad + "\n")
    first, second = (q.to_dict() for q in ingest_file(f).rejected)
    assert first["row"] == {"raw": "{broken", "raw_bytes": 7} and first["notes"] == []
    assert second["row"] == {"raw": long_bad[:2000], "raw_bytes": len(long_bad)}
    assert second["notes"] == [f"row.raw: {len(long_bad)} characters, the first 2000 kept"]


def test_quarantine_lines_are_strict_json_whatever_the_row_held(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"question": NaN, "answer": "#### 1", "score": Infinity, "deep": ' + "[" * 40 + "]" * 40 + "}\n")
    rejected = ingest_file(f).rejected[0]
    line = strict_loads(json.dumps(rejected.to_dict(), allow_nan=False))
    # NaN is no JSON number: the row is refused as read, and its text kept as written
    assert rejected.reason.startswith("not_a_number: NaN") and line["row"]["raw"].startswith('{"question": NaN')
    # a row that holds such values (a Parquet float column) is still written as strict JSON
    held = Rejected(
        "f", 1, "x", {"question": float("nan"), "score": float("inf"), "deep": json.loads("[" * 40 + "]" * 40)}
    )
    line = strict_loads(json.dumps(held.to_dict(), allow_nan=False))
    assert line["row"]["question"] is None and line["row"]["score"] is None
    assert {"row.question: nan written as null", "row.score: inf written as null"} <= set(line["notes"])
    assert any("nested deeper than 16 levels" in n for n in line["notes"])
    odd = Rejected("f", 1, "x", {"when": datetime.date(2020, 1, 2), "n": 10**5000, "many": list(range(500))})
    line = strict_loads(json.dumps(odd.to_dict(), allow_nan=False))
    assert line["row"]["when"] == {"$repr": "datetime.date(2020, 1, 2)", "$type": "date"}
    assert line["row"]["n"]["$type"] == "int" and len(line["row"]["many"]) == 100


@pytest.mark.parametrize(
    "answer",
    [
        "#### x" + " " * 100_000 + "y",
        "####" + " " * 100_000,
        "#### " + "1" * 100_000 + "x",
        "#" * 100_000,
        "#### 1," * 20_000,
    ],
)
def test_hostile_answers_are_rejected_in_linear_time(answer):
    start = time.process_time()
    for _ in range(10):
        with pytest.raises(RowError):
            gsm8k_final_answer(answer)
    # Linear: microseconds per call. The old backtracking regex needed minutes for the first case.
    assert time.process_time() - start < 2.0


def test_good_data_reads_the_same_in_every_format(tmp_path):
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train.jsonl").open()]
    expected = [(r["question"], r["answer"]) for r in rows]
    (tmp_path / "d.json").write_text(json.dumps(rows, indent=1))
    (tmp_path / "d.jsonl").write_bytes(b"\xef\xbb\xbf" + b"".join(jsonl(r).replace(b"\n", b"\r\n") for r in rows))
    pd.DataFrame(rows).to_csv(tmp_path / "d.csv", index=False)
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    for name in ("d.json", "d.jsonl", "d.csv", "d.parquet"):
        got = ingest_file(tmp_path / name)
        assert got.rejected == [] and [(r.prompt, r.solution) for r in got.records] == expected, name
        assert got.records[0].reference_answer == "72"


def test_gzip_files_read_like_their_plain_forms_line_numbers_included(tmp_path):
    rows = [GOOD, {"question": "", "answer": "#### 1"}, GOOD | {"id": "x"}]
    plain = {"d.jsonl": b"".join(jsonl(r) for r in rows), "d.json": json.dumps(rows, indent=1).encode()}
    pd.DataFrame(rows).to_csv(tmp_path / "d.csv", index=False)
    plain["d.csv"] = (tmp_path / "d.csv").read_bytes()
    for name, data in plain.items():
        (tmp_path / name).write_bytes(data)
        (tmp_path / f"{name}.GZ").write_bytes(gzip.compress(data))
        want, got = ingest_file(tmp_path / name), ingest_file(tmp_path / f"{name}.GZ")
        assert [r.id for r in got.records] == [r.id for r in want.records] and len(got.records) == 2, name
        assert kinds(got) == kinds(want) and len(got.rejected) == 1, name  # the same line as the plain file


def test_a_gzip_jsonl_is_streamed_with_its_line_cap(tmp_path):
    f = tmp_path / "d.jsonl.gz"
    f.write_bytes(gzip.compress(jsonl(GOOD) + b'{"question": "' + b"x" * 5000 + b'"}\n' + jsonl(GOOD | {"id": "b"})))
    got = ingest_file(f, max_row_bytes=1024)
    assert kinds(got) == [(2, "row_too_long")] and len(got.records) == 2


# mtime=0: the bytes, and so the test's id, must not depend on the second it was collected in (the
# pytest-xdist workers collect apart and must agree on every id).
@pytest.mark.parametrize(
    "data",
    [b"not gzip at all", gzip.compress(b'{"question": "q?"}\n' * 50, mtime=0)[:40]],
    ids=["not gzip", "truncated gzip"],
)
def test_a_corrupt_or_truncated_gzip_file_is_one_clear_error(tmp_path, data):
    f = tmp_path / "d.jsonl.gz"
    f.write_bytes(data)
    with pytest.raises(ValueError, match=f"{f}: not a readable gzip file"):
        list(read_raw(f))


def test_gzip_is_read_only_for_text_formats(tmp_path):
    f = tmp_path / "d.parquet.gz"
    f.write_bytes(gzip.compress(b"x"))
    with pytest.raises(ValueError, match=r"unsupported format '\.parquet\.gz'"):
        read_raw(f)


@pytest.mark.parametrize(
    "content, problem",
    [
        ("question,question\nq?,#### 1\n", "repeats the column names"),
        ("question,answer" + "," * 2000 + "\n", "longer than"),
    ],
)
def test_a_csv_header_that_cannot_name_the_columns_is_one_clear_error(tmp_path, content, problem):
    f = tmp_path / "d.csv"
    f.write_text(content)
    with pytest.raises(ValueError, match=f"{f}: the CSV header .*{problem}"):
        list(read_raw(f, max_row_bytes=1024))


def test_an_unterminated_string_in_a_json_list_costs_linear_time(tmp_path):
    # Each escaped quote used to restart the string match: 20k of them took 7 s.
    path = tmp_path / "rows.json"
    path.write_text('[{"question": "q", "answer": "#### 1"}, "' + '\\"' * 100_000)
    start = time.process_time()
    with pytest.raises(ValueError, match="rows.json"):
        list(read_raw(path))
    assert time.process_time() - start < 2.0


@given(
    st.lists(
        st.recursive(
            st.none() | st.integers() | st.text(alphabet='ab",]}[{\\ ') | st.floats(allow_nan=False),
            lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(alphabet='k,"]'), kids, max_size=3),
            max_leaves=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_list_elements_are_split_where_json_says(items):
    from grpoflow.data.json_list import _value_end

    text, pos = json.dumps(items), 1
    for item in items:
        while text[pos] in " ,":
            pos += 1
        end = _value_end(text, pos)
        assert json.loads(text[pos:end]) == item
        pos = end


def test_a_hidden_character_in_a_solutions_reasoning_is_not_blamed_for_its_answer():
    row = {"question": "q?", "answer": "Half of 10\u00a0apples is 5.\n#### five"}
    got, _ = reasons([row])
    assert got.rejected[0].reason == "unparseable_answer: answer: final answer 'five' is not a number"
