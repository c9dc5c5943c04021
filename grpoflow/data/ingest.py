"""Ingestion: raw rows from files or a dataset hub, validated and normalised to :class:`Record`.

Four input forms are understood:
- **gsm8k**: ``question`` and ``answer``, the answer a worked solution whose last line is
  ``#### <number>`` (numbers may carry thousands commas; ``<<a*b=c>>`` calculator annotations are
  kept in the solution and stripped nowhere else);
- **math** (Hendrycks MATH): ``problem`` and ``solution``, the final answer in the last ``\\boxed{...}``;
- **code**, in either of two forms. MBPP form: ``prompt`` (MBPP: ``text``), ``tests`` (MBPP:
  ``test_list``), a non-empty list of test sources that each parse as Python, and an optional
  reference program ``solution`` (MBPP: ``code``); MBPP's ``test_imports`` / ``test_setup_code`` are
  put before each test. HumanEval form (a row with ``test`` or ``entry_point``): ``prompt`` (the
  signature and docstring), ``test`` (defines ``check(candidate)``), ``entry_point`` (the function's
  name) and an optional ``canonical_solution`` (the body); its one test is
  ``test + "\\ncheck(<entry_point>)"``. ``task_id`` serves as the id when a row has no ``id``;
- **pairs** (:func:`ingest_pairs`): ``prompt``, ``chosen`` and ``rejected``, two different completions.

Files may be gzip-compressed (``.jsonl.gz``, ``.json.gz``, ``.csv.gz``), read decompressed as a stream.

A row that fails validation is never dropped: it becomes a :class:`Rejected` naming the source
file, the line and the reason. ``line`` is 1-based: the file line where the row starts for JSONL
and CSV (header counted, a quoted field's embedded newlines too), the position in the list for a
``.json`` file and in the table for Parquet and hub datasets.

Hostile input stays a row's problem, never the file's: an undecodable byte, an integer too long for
Python (``sys.get_int_max_str_digits``), nesting too deep for the JSON parser, a line longer than
``data.max_row_bytes`` (read in blocks, only its start kept), control characters or a prompt longer
than ``data.max_prompt_chars``. Only a file that cannot be read as rows at all (a ``.json`` that is
not a list, an unreadable Parquet file, a CSV header with repeated names) raises ``ValueError``
naming the file.

A file is bounded as a whole too, so that a small hostile file cannot cost unbounded memory or time
(a 1 MB ``.json.gz`` inflates to 1 GB; 31 KB of gzip are 32 million empty lines): past
``data.max_file_bytes`` bytes read (decompressed; for Parquet its uncompressed size and the bytes
its rows take in memory) or ``data.max_file_lines`` lines (blank lines count; elements of a
``.json`` list, rows of a Parquet file), reading stops with a ``ValueError`` naming the file, and
the line where it stopped.
"""

from __future__ import annotations

import ast
import csv
import functools
import gzip
import json
import keyword
import re
import sys
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar, cast

from grpoflow.config import DataConfig
from grpoflow.data.records import QUARANTINE_TEXT_CHARS, PairRecord, Record, Rejected
from verifiers.extract import last_boxed

FIELDS = {"gsm8k": ("question", "answer"), "math": ("problem", "solution")}
RECORD_FORMATS = ("gsm8k", "math", "code")  # what ingest() makes Records of; "pairs" is ingest_pairs()
# A code row's fields: our name first, then MBPP's.
CODE_FIELDS = {"prompt": ("prompt", "text"), "tests": ("tests", "test_list"), "solution": ("solution", "code")}
GZIP_FORMATS = (".jsonl", ".ndjson", ".json", ".csv")  # the formats also read as <name>.gz
DEFAULT_MAX_PROMPT_CHARS: int = DataConfig.model_fields["max_prompt_chars"].default
DEFAULT_MAX_ROW_BYTES: int = DataConfig.model_fields["max_row_bytes"].default
DEFAULT_MAX_FILE_BYTES: int = DataConfig.model_fields["max_file_bytes"].default
DEFAULT_MAX_FILE_LINES: int = DataConfig.model_fields["max_file_lines"].default
MAX_ID_CHARS = 200
_NUMBER = re.compile(r"^-?\d+(?:,\d{3})*(?:\.\d+)?$|^-?\d*\.\d+$")
# Unicode category Cc (C0, DEL, C1) except tab and newline, and lone surrogates (UTF-8 cannot encode them).
_BAD_CHAR = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNDECODED = re.compile(r"[\udc80-\udcff]")  # what errors="surrogateescape" makes of a bad byte
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


def _excerpt(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def gsm8k_final_answer(answer: str) -> str:
    """The number after ``####`` on the last line, commas removed; raises :class:`RowError`.

    Linear in the answer's length: a plain ``find`` and ``strip`` instead of a backtracking regex
    (``####\\s*(.+?)\\s*$`` took seconds on ``"#### x" + 20000 spaces + "y"``).
    """
    last = next((line for line in reversed(answer.splitlines()) if line.strip()), "")
    hashes = last.find("####")
    value = last[hashes + 4 :].strip() if hashes >= 0 else ""
    if not value:
        raise RowError("unparseable_answer", "no '#### <number>' final line")
    number = value.replace("$", "").strip()
    if not _NUMBER.match(number):
        raise RowError("unparseable_answer", f"final answer {_excerpt(value)} is not a number")
    return number.replace(",", "")


def _check_characters(name: str, value: str) -> None:
    bad = _BAD_CHAR.search(value)
    if bad is None:
        return
    char, at = bad.group(), bad.start() + 1
    if "\ud800" <= char <= "\udfff":
        raise RowError("invalid_unicode", f"{name} has a lone surrogate U+{ord(char):04X} at character {at}")
    detail = f"{name} has U+{ord(char):04X} at character {at} (only tab and newline allowed)"
    raise RowError("control_character", detail)


def _string(raw: dict[str, Any], name: str) -> str:
    if raw.get(name) is None:
        raise RowError("missing_field", name)
    value = raw[name]
    if not isinstance(value, str):
        raise RowError("wrong_type", f"{name} is {type(value).__name__}, expected str")
    return value


def _text_field(raw: dict[str, Any], name: str, max_chars: int | None = None) -> str:
    value = _string(raw, name).strip()
    if not value:
        raise RowError("empty_field", name)
    if max_chars is not None and len(value) > max_chars:
        detail = f"{name} has {len(value)} characters, above data.max_prompt_chars={max_chars}"
        raise RowError("prompt_too_long", detail)
    _check_characters(name, value)
    return value


def _verbatim_field(raw: dict[str, Any], name: str) -> str:
    """A field of program or completion text: kept as written, since its indentation matters."""
    value = _string(raw, name)
    if not value.strip():
        raise RowError("empty_field", name)
    _check_characters(name, value)
    return value


def _present(raw: dict[str, Any], names: tuple[str, ...]) -> str:
    """The first of ``names`` the row has a value for; the first name when it has none (for the error)."""
    return next((name for name in names if raw.get(name) is not None), names[0])


def _row_id(raw: dict[str, Any], default: str, field: str = "id") -> str:
    rid = raw.get(field)
    if rid is None or (isinstance(rid, str) and not rid):
        return default
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise RowError("invalid_id", f"{field} is {type(rid).__name__}, expected str or int")
    text = str(rid)
    if len(text) > MAX_ID_CHARS:
        raise RowError("invalid_id", f"{field} has {len(text)} characters, at most {MAX_ID_CHARS}")
    try:
        _check_characters("id", text)
    except RowError as err:
        raise RowError("invalid_id", err.reason) from None
    return text


def _parse_python(name: str, source: str, kind: str) -> ast.Module:
    """``source`` parsed (never run), or :class:`RowError` ``kind`` naming the field and the line."""
    try:
        with warnings.catch_warnings():  # e.g. an invalid escape in a test string: not the row's error
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except SyntaxError as exc:
        raise RowError(kind, f"{name}: {exc.msg} on line {exc.lineno}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting the parser cannot hold
        raise RowError(kind, f"{name}: {type(exc).__name__}: {exc}") from None


def _test_setup(raw: dict[str, Any]) -> str:
    """MBPP's lines the asserts need (``test_imports``, a list; ``test_setup_code``, text), or ""."""
    imports = raw.get("test_imports") or []
    if not isinstance(imports, list) or not all(isinstance(line, str) for line in imports):
        raise RowError("wrong_type", "test_imports must be a list of str")
    setup = raw.get("test_setup_code") or ""
    if not isinstance(setup, str):
        raise RowError("wrong_type", f"test_setup_code is {type(setup).__name__}, expected str")
    return "\n".join(line for line in [*imports, setup] if line.strip())


def _mbpp_tests(raw: dict[str, Any]) -> tuple[str, ...]:
    """The MBPP form's asserts: a non-empty list of str, each parsing as Python."""
    name = _present(raw, CODE_FIELDS["tests"])
    tests = raw.get(name)
    if tests is None:
        raise RowError("missing_field", name)
    if not isinstance(tests, list):
        raise RowError("wrong_type", f"{name} is {type(tests).__name__}, expected a list of str")
    if not tests:
        raise RowError("empty_field", name)
    setup = _test_setup(raw)
    out = []
    for i, test in enumerate(tests):
        item = f"{name}[{i}]"
        if not isinstance(test, str):
            raise RowError("wrong_type", f"{item} is {type(test).__name__}, expected str")
        if not test.strip():
            raise RowError("empty_field", item)
        _check_characters(item, test)
        _parse_python(item, test, "unparseable_tests")
        out.append(f"{setup}\n{test}" if setup else test)
    return tuple(out)


def _humaneval_tests(raw: dict[str, Any]) -> tuple[tuple[str, ...], str]:
    """The HumanEval form's one test (``test`` then ``check(<entry_point>)``) and the entry point."""
    test = _verbatim_field(raw, "test")
    entry_point = _text_field(raw, "entry_point")
    if not entry_point.isidentifier() or keyword.iskeyword(entry_point):
        raise RowError("invalid_entry_point", f"entry_point {_excerpt(entry_point)} is not a Python name")
    module = _parse_python("test", test, "unparseable_tests")
    if not any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in module.body):
        raise RowError("unparseable_tests", "test defines no top-level check(candidate) function")
    return (f"{test}\ncheck({entry_point})",), entry_point


def _code_solution(raw: dict[str, Any], names: tuple[str, ...], before: str = "") -> str | None:
    """The optional reference program, kept as written; it must parse (after ``before``, a
    HumanEval prompt, whose body it is)."""
    name = _present(raw, names)
    value = raw.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    solution = _verbatim_field(raw, name)
    _parse_python(name, before + solution, "unparseable_solution")
    return solution


def _code_record(raw: dict[str, Any], row_id: str, source: str, license: str, max_prompt_chars: int) -> Record:
    """A code row in the HumanEval form (it has ``test`` or ``entry_point``) or the MBPP form."""
    entry_point: str | None = None
    if "test" in raw or "entry_point" in raw:
        prompt = _text_field(raw, "prompt", max_prompt_chars)
        tests, entry_point = _humaneval_tests(raw)
        solution = _code_solution(raw, ("canonical_solution",), before=prompt + "\n")
    else:
        prompt = _text_field(raw, _present(raw, CODE_FIELDS["prompt"]), max_prompt_chars)
        tests = _mbpp_tests(raw)
        solution = _code_solution(raw, CODE_FIELDS["solution"])
    rid = _row_id(raw, row_id, "id" if raw.get("id") not in (None, "") else "task_id")
    return Record(
        id=rid,
        prompt=prompt,
        reference_answer=solution or "",
        solution=solution,
        source=source,
        license=license,
        task="code",
        tests=tests,
        entry_point=entry_point,
    )


def _require_object(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RowError("wrong_type", f"row is {type(raw).__name__}, expected an object")
    return raw


def normalise_row(
    raw: Any, fmt: str, *, row_id: str, source: str, license: str, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> Record:
    """One raw row in ``fmt`` form (gsm8k, math or code) as a :class:`Record`, or :class:`RowError`."""
    raw = _require_object(raw)
    if fmt == "code":
        return _code_record(raw, row_id, source, license, max_prompt_chars)
    prompt_field, solution_field = FIELDS[fmt]
    prompt = _text_field(raw, prompt_field, max_prompt_chars)
    solution = _text_field(raw, solution_field)
    if fmt == "gsm8k":
        answer = gsm8k_final_answer(solution)
    else:
        boxed = last_boxed(solution)
        if not boxed:
            raise RowError("unparseable_answer", "no \\boxed{...} final answer in solution")
        answer = boxed
    rid = _row_id(raw, row_id)
    return Record(id=rid, prompt=prompt, reference_answer=answer, solution=solution, source=source, license=license)


def normalise_pair(
    raw: Any, *, row_id: str, source: str, license: str, max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
) -> PairRecord:
    """One preference pair as a :class:`PairRecord`, or :class:`RowError`.

    ``chosen`` and ``rejected`` are kept as written (a completion's leading indentation can be
    code); a pair whose two sides are the same text teaches nothing and is ``identical_pair``.
    """
    raw = _require_object(raw)
    prompt = _text_field(raw, "prompt", max_prompt_chars)
    chosen, rejected = _verbatim_field(raw, "chosen"), _verbatim_field(raw, "rejected")
    if chosen.strip() == rejected.strip():
        raise RowError("identical_pair", "chosen and rejected are the same text")
    rid = _row_id(raw, row_id)
    return PairRecord(id=rid, prompt=prompt, chosen=chosen, rejected=rejected, source=source, license=license)


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
class _Caps:
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
        suffix, gz = _file_format(self.path)
        how += " (decompressed)" if gz else ""
        # A source's limit stops a streamed file early; a .json file is read whole first.
        hint = "raise it" if suffix == ".json" else "raise it, or set the source's limit to read fewer rows"
        return ValueError(
            f"data file {self.path}: {count} bytes {how}, above data.max_file_bytes={self.file_bytes}; {hint}"
        )


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
    caps = _Caps(path, max_row_bytes, max_file_bytes, max_file_lines, max_rows)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix, gz = _file_format(path)
    if gz and suffix not in GZIP_FORMATS:
        raise ValueError(f"data file {path}: unsupported format {suffix + '.gz'!r} (gzip is read for {GZIP_FORMATS})")
    readers: dict[str, Callable[[], Iterator[RawRow]]] = {
        ".jsonl": lambda: _read_jsonl(caps),
        ".ndjson": lambda: _read_jsonl(caps),
        ".json": lambda: _read_json(caps),
        ".parquet": lambda: _read_parquet(caps),
        ".csv": lambda: _read_csv(caps),
    }
    if suffix not in readers:
        raise ValueError(
            f"data file {path}: unsupported format {suffix!r} (use .jsonl, .json, .parquet or .csv, the text "
            "formats optionally .gz)"
        )
    return _gzip_errors(path, readers[suffix]) if gz else readers[suffix]()


def _file_format(path: Path) -> tuple[str, bool]:
    """The format suffix (``.jsonl`` of ``x.jsonl.gz``) and whether the file is gzip-compressed."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return Path(name[:-3]).suffix, True
    return path.suffix.lower(), False


def _open_binary(caps: _Caps) -> _BoundedFile:
    """The file's bytes, decompressed as they are read when its name ends in ``.gz``, at most
    ``caps.file_bytes`` of them."""
    path = caps.path
    fh = cast(BinaryIO, gzip.open(path, "rb")) if path.name.lower().endswith(".gz") else open(path, "rb")
    return _BoundedFile(fh, caps)


class _BoundedFile:
    """A binary file that raises the file's error once more than ``caps.file_bytes`` were read.

    Counted on the bytes handed out, so for a ``.gz`` file on the decompressed ones: the bomb's
    size, not its compressed size, is what memory and time follow.
    """

    def __init__(self, fh: BinaryIO, caps: _Caps):
        self._fh, self._caps, self.count = fh, caps, 0

    def __enter__(self) -> _BoundedFile:
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


def _gzip_errors(path: Path, read: Callable[[], Iterator[RawRow]]) -> Iterator[RawRow]:
    """The rows ``read`` yields, with a corrupt or truncated gzip stream reported as the file's one
    clear error (a ``.json.gz`` is read whole when the first row is asked for)."""
    try:
        yield from read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"data file {path}: not a readable gzip file: {exc}") from None


# --- lines of bounded length -------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    number: int
    data: bytes  # the whole line, terminator included; of an over-long line only its start
    size: int  # bytes of the original line, terminator excluded
    ending: int  # bytes of its terminator (0 at the end of the file)
    oversized: bool
    quotes: int  # '"' bytes in the original line (CSV keeps its quoting state across a skipped line)


def _content_size(chunk: bytes) -> int:
    return len(chunk) - (2 if chunk.endswith(b"\r\n") else 1 if chunk.endswith(b"\n") else 0)


def _read_lines(fh: _BoundedFile, caps: _Caps) -> Iterator[_Line]:
    """Physical lines; a line over ``caps.row_bytes`` is read on in blocks and only its start kept.
    More than ``caps.file_lines`` lines (blank ones too: each costs a loop here) stop the file."""
    number, cap = 0, caps.row_bytes
    while chunk := fh.readline(cap + 1):
        number += 1
        if number > caps.file_lines:
            raise caps.too_many_lines(number)
        if len(chunk) <= cap or chunk.endswith(b"\n"):
            size = _content_size(chunk)
            yield _Line(number, chunk, size, len(chunk) - size, False, 0)
            continue
        head, size, quotes, last = chunk[:_KEEP_BYTES], 0, 0, chunk
        while chunk:
            size, quotes, last = size + _content_size(chunk), quotes + chunk.count(b'"'), chunk
            if chunk.endswith(b"\n"):
                break
            chunk = fh.readline(_BLOCK)
        yield _Line(number, head, size, len(last) - _content_size(last), True, quotes)


def _decode(data: bytes, first: bool) -> str:
    """UTF-8 with bad bytes kept as U+DC80..U+DCFF (found per row later); a leading BOM dropped."""
    text = data.decode("utf-8", "surrogateescape")
    return text[1:] if first and text.startswith("\ufeff") else text


def _undecodable(text: str, start: int = 0, end: int | None = None) -> RowError | None:
    """The first byte of ``text[start:end]`` that was not UTF-8, as a row error (positions from ``start``)."""
    bad = _UNDECODED.search(text, start, len(text) if end is None else end)
    if bad is None:
        return None
    byte, at = ord(bad.group()) - 0xDC00, bad.start() - start + 1
    return RowError("invalid_utf8", f"byte 0x{byte:02X} at character {at} is not UTF-8")


def _check_decoded(text: str) -> None:
    err = _undecodable(text)
    if err:
        raise err


def _too_long(line: _Line, cap: int) -> RawRow:
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


_DECODER = json.JSONDecoder(parse_int=_bounded_int)


def _parse_json(text: str) -> Any:
    _check_decoded(text)
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise RowError("invalid_json", f"{exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RowError("too_deeply_nested", "nested deeper than the JSON parser can follow") from None


def _read_jsonl(caps: _Caps) -> Iterator[RawRow]:
    with _open_binary(caps) as fh:
        for line in _read_lines(fh, caps):
            if line.oversized:
                yield _too_long(line, caps.row_bytes)
                continue
            text = _decode(line.data, line.number == 1)
            if not text.strip():
                continue
            try:
                yield RawRow(line.number, _parse_json(text))
            except RowError as err:
                yield RawRow(line.number, err, text=text.rstrip("\r\n"), size=line.size)


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
        value, end = _DECODER.raw_decode(text, start)
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
    bad = _undecodable(text, start, end)
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


def _read_json(caps: _Caps) -> Iterator[RawRow]:
    path = caps.path
    with _open_binary(caps) as fh:  # held whole: the byte cap is what bounds it
        text = _decode(fh.read(), True)
    pos = _skip_ws(text, 0)
    if not text.startswith("[", pos):
        raise ValueError(
            f"data file {path}: a .json data file must hold one list of row objects, found "
            f"{_json_top_level(text, pos)} (JSON Lines files end in .jsonl)"
        )
    return _json_list(caps, text, _skip_ws(text, pos + 1))


def _json_list(caps: _Caps, text: str, pos: int) -> Iterator[RawRow]:
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


# --- Parquet -----------------------------------------------------------------------------


def _read_parquet(caps: _Caps) -> Iterator[RawRow]:
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


def _check_parquet_size(caps: _Caps, meta: Any) -> None:
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


def _parquet_rows(caps: _Caps, parquet: Any) -> Iterator[RawRow]:
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

    def __init__(self, fh: _BoundedFile, caps: _Caps):
        self._lines = _read_lines(fh, caps)
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
        text = _decode(line.data, line.number == 1)
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
    bad = [f for f in fields if _UNDECODED.search(f)]
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
            _check_decoded(field)
    except RowError as err:
        return lines.raw(err, start)
    return RawRow(start, {name: (value if value != "" else None) for name, value in zip(header, fields)})


def _read_csv(caps: _Caps) -> Iterator[RawRow]:
    path = caps.path
    with _open_binary(caps) as fh:
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


R = TypeVar("R", Record, PairRecord)


@dataclass
class Ingested(Generic[R]):
    """A source's valid records (or pairs), its rejected rows, and how many rows were read."""

    records: list[R]
    rejected: list[Rejected]
    origin: dict[str, tuple[str, int | None]]  # record id -> (source file, line)
    read: int = 0
    source_file: str = ""  # what the rejected rows name as their file, for the gate's verdict


def _quarantine_row(raw: RawRow) -> dict[str, Any]:
    if raw.text is not None:
        return {"raw": raw.text, "raw_bytes": raw.size}
    return raw.value if isinstance(raw.value, dict) else {"raw": raw.value}


def _validate(rows: Iterable[RawRow], make: Callable[..., R], *, source: str, source_file: str) -> Ingested[R]:
    """Each row through ``make(value, row_id=...)``; invalid ones and repeated ids become :class:`Rejected`.

    The one loop behind :func:`ingest` and :func:`ingest_pairs`, so prompts and pairs are judged alike.
    """
    got: Ingested[R] = Ingested([], [], {}, source_file=source_file)
    seen_ids: dict[str, int | None] = {}
    for raw in rows:
        got.read += 1
        try:
            if isinstance(raw.value, Exception):
                raise raw.value
            rec = make(raw.value, row_id=f"{source}-{raw.line}")
            if rec.id in seen_ids:
                raise RowError("duplicate_id", f"id {_excerpt(rec.id)} already used on line {seen_ids[rec.id]}")
        except RowError as err:
            got.rejected.append(Rejected(source_file, raw.line, err.reason, _quarantine_row(raw)))
            continue
        seen_ids[rec.id] = raw.line
        got.records.append(rec)
    got.origin = {rid: (source_file, line) for rid, line in seen_ids.items()}
    return got


def ingest(
    rows: Iterable[RawRow],
    fmt: str,
    *,
    source: str,
    source_file: str,
    license: str,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
) -> Ingested[Record]:
    """Validate and normalise prompt rows (``fmt``: gsm8k, math or code); invalid ones and repeated
    ids become :class:`Rejected`."""
    if fmt not in RECORD_FORMATS:
        hint = " (preference pairs are read by ingest_pairs, from data.pairs)" if fmt == "pairs" else ""
        raise ValueError(f"format {fmt!r} is not a prompt format {RECORD_FORMATS}{hint}")
    make = functools.partial(normalise_row, fmt=fmt, source=source, license=license, max_prompt_chars=max_prompt_chars)
    return _validate(rows, make, source=source, source_file=source_file)


def ingest_pairs(
    rows: Iterable[RawRow],
    *,
    source: str,
    source_file: str,
    license: str,
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
) -> Ingested[PairRecord]:
    """Validate preference pairs (format: pairs) as :func:`ingest` validates prompts."""
    make = functools.partial(normalise_pair, source=source, license=license, max_prompt_chars=max_prompt_chars)
    return _validate(rows, make, source=source, source_file=source_file)
