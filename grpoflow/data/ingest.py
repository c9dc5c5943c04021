"""Ingestion: raw rows from files or a dataset hub, validated and normalised to :class:`Record`.

Four input forms are understood:
- **gsm8k**: ``question`` and ``answer``, the answer a worked solution whose last line is
  ``#### <number>`` (numbers may carry thousands commas; ``<<a*b=c>>`` calculator annotations are
  kept in the solution and stripped nowhere else);
- **math** (Hendrycks MATH): ``problem`` and ``solution``, the final answer in the last ``\\boxed{...}``;
- in both, the answer may also be a plain number (``361``, ``1,234``, ``-3.5``) or in the other
  form's final line (:func:`grpoflow.data.normalise.final_answer`), and the two fields may be
  named otherwise: by the source (``question_field``, ``answer_field``) or found among the common
  pairs question/answer, problem/solution and prompt/response (:mod:`grpoflow.data.fields`);
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

The work is split by job: :mod:`grpoflow.data.readers` reads rows from a file or the hub (on
:mod:`grpoflow.data.raw`'s bounded lines and :mod:`grpoflow.data.json_list` for ``.json`` lists),
:mod:`grpoflow.data.normalise` validates one row, and this module runs a source's rows through it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from grpoflow.data.fields import find_fields
from grpoflow.data.normalise import (
    DEFAULT_MAX_PROMPT_CHARS,
    FIELDS,
    RECORD_FORMATS,
    excerpt,
    gsm8k_final_answer,
    normalise_pair,
    normalise_row,
)
from grpoflow.data.raw import RawRow, RowError
from grpoflow.data.readers import read_hub, read_raw
from grpoflow.data.records import PairRecord, Record, Rejected

# The entry points of ingestion, importable from here whichever module holds them.
__all__ = [
    "Ingested",
    "RawRow",
    "RowError",
    "gsm8k_final_answer",
    "ingest",
    "ingest_pairs",
    "normalise_pair",
    "normalise_row",
    "read_hub",
    "read_raw",
]

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
                raise RowError("duplicate_id", f"id {excerpt(rec.id)} already used on line {seen_ids[rec.id]}")
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
    question_field: str | None = None,
    answer_field: str | None = None,
) -> Ingested[Record]:
    """Validate and normalise prompt rows (``fmt``: gsm8k, math or code); invalid ones and repeated
    ids become :class:`Rejected`. A gsm8k or math row's question and answer are read from the
    fields named, or from the common pair the rows have (:func:`grpoflow.data.fields.find_fields`:
    ``ValueError`` naming the file when none or several are there)."""
    if fmt not in RECORD_FORMATS:
        hint = " (preference pairs are read by ingest_pairs, from data.pairs)" if fmt == "pairs" else ""
        raise ValueError(f"format {fmt!r} is not a prompt format {RECORD_FORMATS}{hint}")
    fields = None
    if fmt in FIELDS:
        rows, fields = find_fields(rows, fmt, source_file, question_field, answer_field)
    make = functools.partial(
        normalise_row, fmt=fmt, source=source, license=license, max_prompt_chars=max_prompt_chars, fields=fields
    )
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
