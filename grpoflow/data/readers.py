"""Raw rows from a data file (JSONL, JSON, Parquet, CSV, the text formats optionally gzip) or a
dataset hub, each with its line number, within the file's caps (:class:`grpoflow.data.raw.FileCaps`).

See :mod:`grpoflow.data.ingest` for what is a row's problem and what is the file's.
"""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from grpoflow.config import DataConfig
from grpoflow.data.json_list import read_json
from grpoflow.data.raw import (
    UNDECODED,
    BoundedFile,
    FileCaps,
    RawRow,
    RowError,
    check_decoded,
    decode_text,
    file_format,
    open_bounded,
    parse_json,
    read_lines,
    too_long_row,
)
from grpoflow.data.records import QUARANTINE_TEXT_CHARS

GZIP_FORMATS = (".jsonl", ".ndjson", ".json", ".csv")  # the formats also read as <name>.gz
DEFAULT_MAX_ROW_BYTES: int = DataConfig.model_fields["max_row_bytes"].default
DEFAULT_MAX_FILE_BYTES: int = DataConfig.model_fields["max_file_bytes"].default
DEFAULT_MAX_FILE_LINES: int = DataConfig.model_fields["max_file_lines"].default


def read_raw(
    path: str | Path,
    *,
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_file_lines: int = DEFAULT_MAX_FILE_LINES,
    max_rows: int | None = None,
) -> Iterator[RawRow]:
    """Rows of a JSONL, JSON (a list), Parquet or CSV file, each with its line number; the text
    formats may be gzip-compressed (``<name>.jsonl.gz``), read as a stream. Past ``max_file_bytes``
    (decompressed) or ``max_file_lines`` the iteration raises ``ValueError`` naming the file.

    ``max_rows`` is how many rows the caller will take at most (a source's ``limit``): streamed
    formats stop when the caller does, but a Parquet file is judged by its footer before any row
    is read, and only the share of it that will be read should count."""
    path = Path(path)
    caps = FileCaps(path, max_row_bytes, max_file_bytes, max_file_lines, max_rows)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix, gz = file_format(path)
    if gz and suffix not in GZIP_FORMATS:
        raise ValueError(f"data file {path}: unsupported format {suffix + '.gz'!r} (gzip is read for {GZIP_FORMATS})")
    readers: dict[str, Callable[[], Iterator[RawRow]]] = {
        ".jsonl": lambda: _read_jsonl(caps),
        ".ndjson": lambda: _read_jsonl(caps),
        ".json": lambda: read_json(caps),
        ".parquet": lambda: _read_parquet(caps),
        ".csv": lambda: _read_csv(caps),
    }
    if suffix not in readers:
        raise ValueError(
            f"data file {path}: unsupported format {suffix!r} (use .jsonl, .json, .parquet or .csv, the text "
            "formats optionally .gz)"
        )
    return _gzip_errors(path, readers[suffix]) if gz else readers[suffix]()


def _gzip_errors(path: Path, read: Callable[[], Iterator[RawRow]]) -> Iterator[RawRow]:
    """The rows ``read`` yields, with a corrupt or truncated gzip stream reported as the file's one
    clear error (a ``.json.gz`` is read whole when the first row is asked for)."""
    try:
        yield from read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"data file {path}: not a readable gzip file: {exc}") from None


def _read_jsonl(caps: FileCaps) -> Iterator[RawRow]:
    with open_bounded(caps) as fh:
        for line in read_lines(fh, caps):
            if line.oversized:
                yield too_long_row(line, caps.row_bytes)
                continue
            text = decode_text(line.data, line.number == 1)
            if not text.strip():
                continue
            try:
                yield RawRow(line.number, parse_json(text))
            except RowError as err:
                yield RawRow(line.number, err, text=text.rstrip("\r\n"), size=line.size)


def _read_parquet(caps: FileCaps) -> Iterator[RawRow]:
    """Rows as plain Python values via pyarrow (lists stay lists; no numpy arrays to compare)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = caps.path
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"data file {path}: not a readable Parquet file: {exc}") from None
    _check_parquet_size(caps, parquet.metadata)
    return _parquet_rows(caps, parquet)


def _check_parquet_size(caps: FileCaps, meta: Any) -> None:
    """Refuse before reading a file whose footer says that what will be read is past either cap
    (compression and dictionary encoding let a small Parquet file stand for a huge table); of a
    file read only in part (``caps.rows``), its share of the uncompressed size counts."""
    rows = meta.num_rows if caps.rows is None else min(meta.num_rows, caps.rows)
    if rows > caps.file_lines:
        raise caps.too_many_lines(rows, "row count", " (the file's footer)")
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    share = size if rows == meta.num_rows else size * rows // max(meta.num_rows, 1)
    if share > caps.file_bytes:
        raise caps.too_many_bytes(share, "uncompressed to read, by the file's footer")


def _parquet_rows(caps: FileCaps, parquet: Any) -> Iterator[RawRow]:
    """The rows batch by batch; the bytes the batches take in memory count against the byte cap,
    since the footer's sizes are the file's word, not a measurement."""
    import pyarrow as pa

    done, held = 0, 0
    batches = parquet.iter_batches(batch_size=1024)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise ValueError(f"data file {caps.path}: Parquet data unreadable after row {done}: {exc}") from None
        if batch is None:
            return
        held += batch.nbytes
        if held > caps.file_bytes:
            raise caps.too_many_bytes(held, "of rows in memory")
        for row in _batch_rows(batch, done):
            if cast(int, row.line) > caps.file_lines:  # raised only when the caller asks for the row
                raise caps.too_many_lines(cast(int, row.line), "row")
            yield row
        done += batch.num_rows


def _batch_rows(batch: Any, done: int) -> Iterator[RawRow]:
    try:
        rows = batch.to_pylist()
    except Exception:  # one value Python cannot hold (e.g. a date past year 9999): find it row by row
        rows = None
    for i in range(batch.num_rows):
        if rows is not None:
            yield RawRow(done + i + 1, rows[i])
            continue
        try:
            yield RawRow(done + i + 1, batch.slice(i, 1).to_pylist()[0])
        except Exception as exc:  # pyarrow raises several kinds for one unconvertible value
            yield RawRow(done + i + 1, RowError("unreadable_value", f"{type(exc).__name__}: {exc}"))


# --- CSV ---------------------------------------------------------------------------------


class _CsvLines:
    """Physical lines for :func:`csv.reader`, remembering what the row being read was made of.

    ``csv.reader`` asks for one line at a time and stops at the end of a row, so what was read
    since :meth:`start_row` is exactly that row. An over-long line is replaced by a stand-in with
    the same parity of ``"`` and marks the row: under RFC 4180 quoting (a quoted field may span
    lines, ``""`` is a literal quote) every ``"`` toggles whether the reader is inside a quoted
    field, so the reader's state after the stand-in is the one it would have had after the line.
    """

    def __init__(self, fh: BoundedFile, caps: FileCaps):
        self._lines = read_lines(fh, caps)
        self.cap = caps.row_bytes
        self.count = 0
        self.start_row()

    def start_row(self) -> None:
        """Forget the previous row."""
        self.kept: list[str] = []
        self.size = 0  # bytes of the row, its last line's terminator excluded
        self._ending = 0
        self.oversized = False

    def __iter__(self) -> _CsvLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.count = line.number
        self.size += self._ending + line.size
        self._ending = line.ending
        if line.oversized:
            self.oversized = True
            self._keep(line.data.decode("utf-8", "replace"))
            return ('"' if line.quotes % 2 else "") + "\x00\n"
        text = decode_text(line.data, line.number == 1)
        self._keep(text)
        return text

    def _keep(self, text: str) -> None:
        if sum(map(len, self.kept)) <= QUARANTINE_TEXT_CHARS:
            self.kept.append(text[: QUARANTINE_TEXT_CHARS + 1])

    def raw(self, error: RowError, start: int) -> RawRow:
        """The row read since :meth:`start_row` as a rejected row with its text."""
        return RawRow(start, error, text="".join(self.kept).rstrip("\r\n"), size=self.size)


def _csv_header(path: Path, fields: list[str], lines: _CsvLines) -> list[str]:
    """The column names; a header that cannot name the columns is the file's problem."""
    if lines.oversized:
        raise ValueError(f"data file {path}: the CSV header is longer than data.max_row_bytes={lines.cap}")
    bad = [f for f in fields if UNDECODED.search(f)]
    if bad:
        raise ValueError(f"data file {path}: the CSV header has bytes that are not UTF-8: {bad[0]!r}")
    repeated = sorted({f for f in fields if fields.count(f) > 1})
    if repeated:
        raise ValueError(f"data file {path}: the CSV header repeats the column names {repeated}")
    return fields


def _csv_row(header: list[str], fields: list[str], start: int, lines: _CsvLines) -> RawRow:
    """One CSV record as a row dict (empty fields are missing, as in the pandas reader before)."""
    if lines.oversized:
        detail = f"{lines.size} bytes, a line above data.max_row_bytes={lines.cap}"
        return lines.raw(RowError("row_too_long", detail), start)
    if len(fields) != len(header):
        return lines.raw(RowError("malformed_csv", f"{len(fields)} fields, the header has {len(header)}"), start)
    try:
        for field in fields:
            check_decoded(field)
    except RowError as err:
        return lines.raw(err, start)
    return RawRow(start, {name: (value if value != "" else None) for name, value in zip(header, fields)})


def _read_csv(caps: FileCaps) -> Iterator[RawRow]:
    path = caps.path
    with open_bounded(caps) as fh:
        lines = _CsvLines(fh, caps)
        reader = csv.reader(lines)
        header: list[str] | None = None
        while True:
            start = lines.count + 1
            lines.start_row()
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield lines.raw(RowError("malformed_csv", str(exc)), start)
                continue
            if not fields and not lines.oversized:
                continue  # a blank line
            if header is None:
                header = _csv_header(path, fields, lines)
                continue
            yield _csv_row(header, fields, start, lines)


# --- hub ---------------------------------------------------------------------------------


def read_hub(name: str, subset: str | None, split: str) -> Iterator[RawRow]:
    """Rows of a ``datasets`` hub dataset (local caches and HF_DATASETS_OFFLINE behave as usual)."""
    import datasets

    try:
        ds = datasets.load_dataset(name, subset, split=split)
    except Exception as exc:  # datasets raises many kinds; all mean "cannot load it here"
        raise FileNotFoundError(
            f"dataset {name!r} (subset {subset!r}, split {split!r}) could not be loaded: {exc}. "
            "Offline, only datasets already in the local Hugging Face cache can be used; "
            "otherwise point the source at a local file."
        ) from exc
    for n, row in enumerate(ds, start=1):
        yield RawRow(n, dict(row))


# --- validation --------------------------------------------------------------------------
