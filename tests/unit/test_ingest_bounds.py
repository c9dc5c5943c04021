"""A data file is bounded as a whole: decompressed bytes and lines (issue 23, item 6).

The bombs are built here at small scale against lowered caps; what is asserted is the error (naming
the file and the line) and, for the byte cap, the memory the read took, never a time.
"""

import gzip
import json
import tracemalloc
from itertools import islice
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.config import validate_params
from grpoflow.data import readers
from grpoflow.data.ingest import read_raw
from grpoflow.data.prepare import prepare

ROW = json.dumps({"question": "Ann has 2 cats. How many?", "answer": "#### 2"})


def rows_of(path: Path, **caps: int) -> list:
    return list(read_raw(path, **caps))


def test_a_json_gz_bomb_stops_at_the_byte_cap_without_holding_the_inflated_file(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:  # 8 MiB of whitespace in a few KB
        fh.write(b"[" + b" " * (8 << 20) + b"]")
    assert bomb.stat().st_size < 64 << 10
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError,
            match=rf"data file {bomb}: 65537 bytes read \(decompressed\), above "
            r"data.max_file_bytes=65536; raise it$",
        ):
            rows_of(bomb, max_file_bytes=64 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20  # before the cap: the whole 8 MiB, twice (bytes, then str)


def test_a_jsonl_gz_of_newlines_stops_at_the_line_cap_naming_the_line(tmp_path):
    bomb = tmp_path / "newlines.jsonl.gz"
    with gzip.open(bomb, "wb") as fh:
        fh.write(b"\n" * 100_000)
    message = rf"data file {bomb}: line 1001 is past data.max_file_lines=1000 \(blank lines count\)"
    with pytest.raises(ValueError, match=message):
        rows_of(bomb, max_file_lines=1000)


@settings(max_examples=30, deadline=None)
@given(lines=st.lists(st.sampled_from(["", "  ", ROW]), max_size=40), cap=st.integers(1, 40))
def test_a_text_file_is_refused_exactly_when_it_has_more_lines_than_the_cap(tmp_path_factory, lines, cap):
    f = tmp_path_factory.mktemp("lines") / "d.jsonl"
    f.write_text("".join(line + "\n" for line in lines))
    if len(lines) > cap:
        with pytest.raises(ValueError, match=f"line {cap + 1} is past data.max_file_lines={cap}"):
            rows_of(f, max_file_lines=cap)
    else:
        assert len(rows_of(f, max_file_lines=cap)) == lines.count(ROW)


def test_the_byte_cap_counts_every_byte_and_a_file_at_the_cap_passes(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(f"{ROW}\n" * 40)
    size = f.stat().st_size  # 40 * (len(ROW) + 1)
    assert len(rows_of(f, max_file_bytes=size)) == 40
    with pytest.raises(ValueError, match=rf"{size} bytes read, above data.max_file_bytes={size - 1}; raise it, or"):
        rows_of(f, max_file_bytes=size - 1)


def test_csv_files_have_both_caps(tmp_path):
    f = tmp_path / "d.csv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("question,answer\n" + "\n" * 50 + '"How many?","#### 1"\n')
    with pytest.raises(ValueError, match=rf"data file {f}: line 11 is past data.max_file_lines=10"):
        rows_of(f, max_file_lines=10)
    with gzip.open(f, "wt") as fh:  # a 16-byte header, then 21-byte rows: row 48 ends at byte 1024
        fh.write("question,answer\n" + '"How many?","#### 1"\n' * 100)
    with pytest.raises(
        ValueError, match=rf"data file {f}: 1045 bytes read \(decompressed\), above data.max_file_bytes"
    ):
        rows_of(f, max_file_bytes=1024)
    assert len(list(islice(read_raw(f, max_file_bytes=1024), 48))) == 48


def test_a_json_list_counts_its_elements_against_the_line_cap(tmp_path):
    f = tmp_path / "d.json"
    f.write_text("[{},\n {},\n {}]")
    assert len(rows_of(f, max_file_lines=3)) == 3
    with pytest.raises(ValueError, match=rf"{f}: list element 3 \(at line 3, column 2\) is past data.max_file_lines=2"):
        rows_of(f, max_file_lines=2)


def test_parquet_is_judged_by_its_footer_before_any_row_is_read(tmp_path):
    f = tmp_path / "d.parquet"
    pq.write_table(pa.table({"question": ["x" * 1000] * 10, "answer": ["#### 1"] * 10}), f)
    with pytest.raises(ValueError, match=rf"{f}: row count 10 \(the file's footer\) is past data.max_file_lines=5"):
        rows_of(f, max_file_lines=5)
    assert len(list(islice(read_raw(f, max_file_lines=5, max_rows=5), 5))) == 5  # a source limit of 5 reads 5
    footer = rf"{f}: \d+ bytes uncompressed to read, by the file's footer, above data.max_file_bytes=2048"
    with pytest.raises(ValueError, match=footer):
        rows_of(f, max_file_bytes=2048)


def test_parquet_rows_in_memory_count_too_when_the_footer_understates(tmp_path, monkeypatch):
    f = tmp_path / "d.parquet"
    pq.write_table(pa.table({"question": ["x" * 1000] * 10, "answer": ["#### 1"] * 10}), f)
    monkeypatch.setattr(readers, "_check_parquet_size", lambda caps, meta: None)  # a footer that lies
    with pytest.raises(ValueError, match=rf"{f}: \d+ bytes of rows in memory, above data.max_file_bytes=2048"):
        rows_of(f, max_file_bytes=2048)
    with pytest.raises(ValueError, match=rf"{f}: row 6 is past data.max_file_lines=5; raise it"):
        rows_of(f, max_file_lines=5)


def test_prepare_applies_the_data_sections_caps_and_a_source_limit_stops_before_them(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(
        "".join(json.dumps({"question": f"How many is {i}?", "answer": f"#### {i}"}) + "\n" for i in range(30))
    )
    source = {"kind": "file", "path": str(f), "license": "MIT"}
    data = validate_params({"data": {"sources": [source], "max_file_lines": 20}}).data
    with pytest.raises(ValueError, match=rf"data file {f}: line 21 is past data.max_file_lines=20"):
        prepare(0, data, tmp_path)
    limited = validate_params({"data": {"sources": [source | {"limit": 20}], "max_file_lines": 20}}).data
    assert prepare(0, limited, tmp_path).source_rows == {"d": 20}
