"""A ``.json`` data file (one list of row objects) read element by element.

The file is held whole (the byte cap bounds it); each element is parsed on its own, so a bad
element is one rejected row and only a list that cannot be read on (an element that never ends,
a missing comma) is the file's error. Elements are found by bracket matching
(:func:`_value_end`), each character looked at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from grpoflow.data.raw import JSON_DECODER, FileCaps, RawRow, RowError, decode_text, open_bounded, undecodable
from grpoflow.data.records import QUARANTINE_TEXT_CHARS


def _json_top_level(text: str, pos: int) -> str:
    if pos >= len(text):
        return "an empty file"
    kinds = {"{": "an object", '"': "a string", "t": "a boolean", "f": "a boolean", "n": "null", "[": "a list"}
    if text[pos] in kinds:
        return kinds[text[pos]]
    return "a number" if text[pos] in "-0123456789" else "no JSON value"


_WS = re.compile(r"[ \t\r\n]*")
# Structural characters and string delimiters; inside a string only quotes and escapes matter.
_STRUCTURE = re.compile(r'["\[\]{},]')
_IN_STRING = re.compile(r'["\\]')


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty string


def _string_end(text: str, opening: int) -> int | None:
    """The index after the string that opens at ``opening``; None if it never closes. Each
    character is looked at once: an unterminated string costs O(n), not O(n^2) retries."""
    pos = opening + 1
    while (m := _IN_STRING.search(text, pos)) is not None:
        if m.group() == '"':
            return m.end()
        pos = m.end() + 1  # skip the escaped character
    return None


def _value_end(text: str, start: int) -> int | None:
    """Where the list element starting at ``start`` ends, by bracket matching; None if it never does."""
    depth, pos = 0, start
    while (m := _STRUCTURE.search(text, pos)) is not None:
        char, pos = m.group(), m.end()
        if char == '"':
            end = _string_end(text, m.start())
            if end is None:
                return None
            pos = end
        elif char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                return m.start()
            depth -= 1
            if depth == 0:
                return m.end()
        elif depth == 0:  # a comma between elements
            return m.start()
    return None


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - text.rfind(chr(10), 0, pos)}"


def _json_element(text: str, start: int, index: int, cap: int) -> tuple[RawRow, int | None]:
    """The list element at ``start`` as a row, and where it ends (None: the list cannot be read on)."""
    try:
        value, end = JSON_DECODER.raw_decode(text, start)
    except (RowError, json.JSONDecodeError, RecursionError) as exc:
        after = _value_end(text, start)
        found = _span_error(text, start, after or len(text), cap, check_size=False) or _json_error(exc, start)
        return (
            (RawRow(index, found), None) if after is None else (_bad_element(text, start, after, index, found), after)
        )
    err = _span_error(text, start, end, cap, check_size=True)
    return (RawRow(index, value) if err is None else _bad_element(text, start, end, index, err)), end


def _span_error(text: str, start: int, end: int, cap: int, *, check_size: bool) -> RowError | None:
    """An undecodable byte in the element's text, or (``check_size``) its length over ``cap``."""
    bad = undecodable(text, start, end)
    if bad:
        return bad
    if check_size and end - start > cap and _utf8_size(text, start, end) > cap:
        return RowError("row_too_long", f"{_utf8_size(text, start, end)} bytes, above data.max_row_bytes={cap}")
    return None


def _bad_element(text: str, start: int, end: int, index: int, err: RowError) -> RawRow:
    raw = text[start : min(end, start + QUARANTINE_TEXT_CHARS + 1)]
    return RawRow(index, err, text=raw, size=_utf8_size(text, start, end))


def _json_error(exc: Exception, start: int) -> RowError:
    if isinstance(exc, RowError):
        return exc
    if isinstance(exc, json.JSONDecodeError):  # positions within the row: counting file lines per error is quadratic
        return RowError("invalid_json", f"{exc.msg} at character {exc.pos - start + 1} of the row")
    return RowError("too_deeply_nested", "nested deeper than the JSON parser can follow")


def _utf8_size(text: str, start: int, end: int) -> int:
    return len(text[start:end].encode("utf-8", "surrogateescape"))


def read_json(caps: FileCaps) -> Iterator[RawRow]:
    """The rows of a ``.json`` file, one per list element; a file that is not one list is the file's error."""
    path = caps.path
    with open_bounded(caps) as fh:  # held whole: the byte cap is what bounds it
        text = decode_text(fh.read(), True)
    pos = _skip_ws(text, 0)
    if not text.startswith("[", pos):
        raise ValueError(
            f"data file {path}: a .json data file must hold one list of row objects, found "
            f"{_json_top_level(text, pos)} (JSON Lines files end in .jsonl)"
        )
    return _json_list(caps, text, _skip_ws(text, pos + 1))


def _json_list(caps: FileCaps, text: str, pos: int) -> Iterator[RawRow]:
    """Each element of the list opened before ``pos``; a bad element is a row, a broken list an error."""
    path, cap, index = caps.path, caps.row_bytes, 0
    while not text.startswith("]", pos):
        index += 1
        if index > caps.file_lines:
            raise caps.too_many_lines(index, "list element", f" (at {_line_col(text, pos)})")
        row, end = _json_element(text, pos, index, cap)
        if end is None:
            where = _line_col(text, pos)
            raise ValueError(f"data file {path}: list element {index} at {where} never ends ({row.value})")
        yield row
        pos = _skip_ws(text, end)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        elif not text.startswith("]", pos):
            where = _line_col(text, pos)
            raise ValueError(f"data file {path}: expected ',' or ']' after list element {index} at {where}")
    rest = _skip_ws(text, pos + 1)
    if rest < len(text):
        raise ValueError(f"data file {path}: unexpected text after the list's closing ']' at {_line_col(text, rest)}")
