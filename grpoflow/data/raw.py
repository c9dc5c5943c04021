"""A row as read from a data file, and what reading one file may cost.

:class:`RawRow` is one row (its line, and its value or the :class:`RowError` that stopped it);
:class:`FileCaps` bounds one file (bytes per row, bytes and lines of the whole file), which
:class:`BoundedFile` and :func:`read_lines` enforce as they read; the decoding and JSON helpers keep
a bad byte, a huge integer or deep nesting a row's problem. The readers built on these are in
:mod:`grpoflow.data.readers`, the overview in :mod:`grpoflow.data.ingest`.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from grpoflow.data.records import QUARANTINE_TEXT_CHARS

UNDECODED = re.compile(r"[\udc80-\udcff]")  # what errors="surrogateescape" makes of a bad byte
_KEEP_BYTES = 4 * QUARANTINE_TEXT_CHARS  # of an over-long line: enough for the quarantine's excerpt
_BLOCK = 1 << 20
_DETAIL_CHARS = 300


class RowError(ValueError):
    """One row's problem; ``reason`` is ``kind: detail`` (the kind is what the summary counts)."""

    def __init__(self, kind: str, detail: str):
        if len(detail) > _DETAIL_CHARS:
            detail = detail[: _DETAIL_CHARS - 1] + "…"
        super().__init__(f"{kind}: {detail}")
        self.reason = f"{kind}: {detail}"


@dataclass(frozen=True)
class RawRow:
    """One row as read: where it starts, and the parsed value or the :class:`RowError` that stopped it.

    ``text`` is the row's original text (possibly only its start) when it could not be parsed, and
    ``size`` the original length in bytes, for the quarantine.
    """

    line: int | None
    value: Any
    text: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class FileCaps:
    """What one file may cost: bytes per row, and bytes (decompressed) and lines of the whole file."""

    path: Path
    row_bytes: int
    file_bytes: int
    file_lines: int
    rows: int | None = None  # the most rows the caller will take (a source's limit), None: all

    def too_many_lines(self, number: int, what: str = "line", where: str = "") -> ValueError:
        """The file's error for line (list element, row) ``number`` past ``data.max_file_lines``."""
        blank = " (blank lines count)" if what == "line" else ""
        return ValueError(
            f"data file {self.path}: {what} {number}{where} is past data.max_file_lines={self.file_lines}{blank}; "
            "raise it, or set the source's limit to read fewer rows"
        )

    def too_many_bytes(self, count: int, how: str = "read") -> ValueError:
        """The file's error once ``count`` bytes (``how`` says of what) exceed ``data.max_file_bytes``."""
        suffix, gz = file_format(self.path)
        how += " (decompressed)" if gz else ""
        # A source's limit stops a streamed file early; a .json file is read whole first.
        hint = "raise it" if suffix == ".json" else "raise it, or set the source's limit to read fewer rows"
        return ValueError(
            f"data file {self.path}: {count} bytes {how}, above data.max_file_bytes={self.file_bytes}; {hint}"
        )


def file_format(path: Path) -> tuple[str, bool]:
    """The format suffix (``.jsonl`` of ``x.jsonl.gz``) and whether the file is gzip-compressed."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return Path(name[:-3]).suffix, True
    return path.suffix.lower(), False


def open_bounded(caps: FileCaps) -> BoundedFile:
    """The file's bytes, decompressed as they are read when its name ends in ``.gz``, at most
    ``caps.file_bytes`` of them."""
    path = caps.path
    fh = cast(BinaryIO, gzip.open(path, "rb")) if path.name.lower().endswith(".gz") else open(path, "rb")
    return BoundedFile(fh, caps)


class BoundedFile:
    """A binary file that raises the file's error once more than ``caps.file_bytes`` were read.

    Counted on the bytes handed out, so for a ``.gz`` file on the decompressed ones: the bomb's
    size, not its compressed size, is what memory and time follow.
    """

    def __init__(self, fh: BinaryIO, caps: FileCaps):
        self._fh, self._caps, self.count = fh, caps, 0

    def __enter__(self) -> BoundedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def _counted(self, chunk: bytes) -> bytes:
        self.count += len(chunk)
        if self.count > self._caps.file_bytes:
            raise self._caps.too_many_bytes(self.count)
        return chunk

    def readline(self, size: int = -1) -> bytes:
        """One line (at most ``size`` bytes of it), counted."""
        return self._counted(self._fh.readline(size))

    def read(self, size: int = -1) -> bytes:
        """At most ``size`` bytes; all of them only up to one byte past the cap (never the whole bomb)."""
        room = self._caps.file_bytes - self.count + 1
        return self._counted(self._fh.read(room if size < 0 else min(size, room)))


# --- lines of bounded length -------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One physical line of a file, as :func:`read_lines` hands it out."""

    number: int
    data: bytes  # the whole line, terminator included; of an over-long line only its start
    size: int  # bytes of the original line, terminator excluded
    ending: int  # bytes of its terminator (0 at the end of the file)
    oversized: bool
    quotes: int  # '"' bytes in the original line (CSV keeps its quoting state across a skipped line)


def _content_size(chunk: bytes) -> int:
    return len(chunk) - (2 if chunk.endswith(b"\r\n") else 1 if chunk.endswith(b"\n") else 0)


def read_lines(fh: BoundedFile, caps: FileCaps) -> Iterator[Line]:
    """Physical lines; a line over ``caps.row_bytes`` is read on in blocks and only its start kept.
    More than ``caps.file_lines`` lines (blank ones too: each costs a loop here) stop the file."""
    number, cap = 0, caps.row_bytes
    while chunk := fh.readline(cap + 1):
        number += 1
        if number > caps.file_lines:
            raise caps.too_many_lines(number)
        if len(chunk) <= cap or chunk.endswith(b"\n"):
            size = _content_size(chunk)
            yield Line(number, chunk, size, len(chunk) - size, False, 0)
            continue
        head, size, quotes, last = chunk[:_KEEP_BYTES], 0, 0, chunk
        while chunk:
            size, quotes, last = size + _content_size(chunk), quotes + chunk.count(b'"'), chunk
            if chunk.endswith(b"\n"):
                break
            chunk = fh.readline(_BLOCK)
        yield Line(number, head, size, len(last) - _content_size(last), True, quotes)


def decode_text(data: bytes, first: bool) -> str:
    """UTF-8 with bad bytes kept as U+DC80..U+DCFF (found per row later); a leading BOM dropped."""
    text = data.decode("utf-8", "surrogateescape")
    return text[1:] if first and text.startswith("\ufeff") else text


def undecodable(text: str, start: int = 0, end: int | None = None) -> RowError | None:
    """The first byte of ``text[start:end]`` that was not UTF-8, as a row error (positions from ``start``)."""
    bad = UNDECODED.search(text, start, len(text) if end is None else end)
    if bad is None:
        return None
    byte, at = ord(bad.group()) - 0xDC00, bad.start() - start + 1
    return RowError("invalid_utf8", f"byte 0x{byte:02X} at character {at} is not UTF-8")


def check_decoded(text: str) -> None:
    """Raise the :class:`RowError` of the first byte of ``text`` that was not UTF-8, if any."""
    err = undecodable(text)
    if err:
        raise err


def too_long_row(line: Line, cap: int) -> RawRow:
    """The rejected row of a line over ``cap`` bytes, with the start of its text."""
    err = RowError("row_too_long", f"{line.size} bytes, above data.max_row_bytes={cap}")
    return RawRow(line.number, err, text=line.data.decode("utf-8", "replace"), size=line.size)


# --- JSON --------------------------------------------------------------------------------


def _bounded_int(digits: str) -> int:
    """``int`` for the JSON parser, a :class:`RowError` past Python's int-string limit (not a bare ValueError)."""
    limit = sys.get_int_max_str_digits()
    count = len(digits) - digits.startswith("-")
    if limit and count > limit:
        raise RowError("number_too_large", f"an integer of {count} digits (Python converts at most {limit})")
    return int(digits)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (the parser would keep the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RowError("duplicate_key", f"field {key!r} is given twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: not JSON (RFC 8259), and no number a row should hold."""
    raise RowError("not_a_number", f"{name} is not a JSON number (RFC 8259): write the value, or leave the row out")


JSON_DECODER = json.JSONDecoder(parse_int=_bounded_int, object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def parse_json(text: str) -> Any:
    """One row's JSON value; a bad byte, invalid JSON, a huge integer or deep nesting is a :class:`RowError`."""
    check_decoded(text)
    try:
        return JSON_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise RowError("invalid_json", f"{exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RowError("too_deeply_nested", "nested deeper than the JSON parser can follow") from None
