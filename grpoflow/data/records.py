"""The one row schema every data source is normalised to, its task, how a batch of rows is scored, and
the quarantine row.

A quarantine row keeps what was rejected, made strict JSON (RFC 8259: no ``NaN``, valid UTF-8) and
of bounded size by :func:`json_safe`; every change is described in the row's ``notes``:

- a string longer than :data:`QUARANTINE_TEXT_CHARS` keeps its start (the note gives its length);
- a lone surrogate (an undecodable input byte read as U+DC80..U+DCFF, or a ``\\ud800`` escape) is
  written as the text ``\\udcff``;
- ``NaN`` and ``±Infinity`` become ``null``;
- bytes become ``{"$bytes_b64": <base64 of the first 1500 bytes>, "$bytes_len": <length>}``;
- any other non-JSON value (a date, a Decimal, ...) becomes ``{"$repr": <repr, cut>, "$type": <name>}``;
- lists and objects keep their first :data:`QUARANTINE_MAX_ITEMS` items, nesting stops at
  :data:`QUARANTINE_MAX_DEPTH` levels.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

QUARANTINE_TEXT_CHARS = 2000
QUARANTINE_MAX_ITEMS = 100
QUARANTINE_MAX_DEPTH = 16
_BYTES_KEPT = 1500
_REASON_CHARS = 1000


Rows = Sequence[Mapping[str, Any]]
BatchScorer = Callable[[Sequence[str], Rows], list[float]]  # (completions, their task rows) -> scores
TASK_KEY, DEFAULT_TASK = "task", "math"  # a split row's task; rows written before code tasks are math


def row_task(row: Mapping[str, Any]) -> str:
    """The task of a split row: ``math`` or ``code`` (which verifiers judge it)."""
    return str(row.get(TASK_KEY) or DEFAULT_TASK)


@dataclass(frozen=True)
class Record:
    """A verifiable prompt: the model sees ``prompt``; verifiers compare to ``reference_answer``.

    ``task`` says which verifiers judge it: ``"math"`` (a final answer) or ``"code"`` (a program run
    against ``tests``, each item a test source run in one shared scope). ``entry_point`` names the
    function of a HumanEval-form row, whose ``prompt`` holds the signature the completion continues.
    """

    id: str
    prompt: str
    reference_answer: str
    solution: str | None
    source: str
    license: str
    task: str = "math"
    tests: tuple[str, ...] | None = None
    entry_point: str | None = None

    def __post_init__(self) -> None:
        # A tuple keeps the frozen record hashable and its tests unchangeable, whatever the caller passed.
        if self.tests is not None and not isinstance(self.tests, tuple):
            object.__setattr__(self, "tests", tuple(self.tests))

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (the split files' row; ``tests`` a list or null)."""
        out = asdict(self)
        out["tests"] = None if self.tests is None else list(self.tests)
        return out


@dataclass(frozen=True)
class PairRecord:
    """A preference pair: for ``prompt``, the completion ``chosen`` is better than ``rejected``."""

    id: str
    prompt: str
    chosen: str
    rejected: str
    source: str
    license: str

    def to_dict(self) -> dict[str, Any]:
        """The pair as a JSON-ready dict (a pairs.jsonl row)."""
        return asdict(self)


@dataclass(frozen=True)
class Rejected:
    """A row that did not make it into any split, and why: the quarantine file's row.

    ``row`` is stored already made safe by :func:`json_safe` (so a 200 MB rejected row is not
    kept whole), with a note in ``notes`` for everything that had to change.
    """

    source_file: str
    line: int | None
    reason: str
    row: dict[str, Any]
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        safe, notes = json_safe(self.row if isinstance(self.row, dict) else {"raw": self.row})
        object.__setattr__(self, "row", safe)
        object.__setattr__(self, "notes", tuple(self.notes) + tuple(notes))
        object.__setattr__(self, "reason", _cut_text(self.reason, _REASON_CHARS))

    def to_dict(self) -> dict[str, Any]:
        """The quarantine line: strict JSON data."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


def _cut_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_safe(value: Any) -> tuple[Any, list[str]]:
    """``value`` as strict, bounded JSON data, and one note per change (see the module docstring)."""
    notes: list[str] = []
    return _safe(value, "row", 0, notes), notes


def _safe(value: Any, path: str, depth: int, notes: list[str]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _safe_str(value, path, notes)
    if isinstance(value, int):  # past ~4300 digits json.dumps (int -> str) refuses it
        return value if value.bit_length() <= 10_000 else _safe_other(value, path, notes)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        notes.append(f"{path}: {value!r} written as null")
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _safe_bytes(bytes(value[:_BYTES_KEPT]), len(value), path, notes)
    if isinstance(value, (dict, list, tuple)):
        if depth >= QUARANTINE_MAX_DEPTH:
            notes.append(f"{path}: nested deeper than {QUARANTINE_MAX_DEPTH} levels, not kept")
            return {"$repr": f"<{type(value).__name__} nested too deep>", "$type": type(value).__name__}
        return _safe_container(value, path, depth, notes)
    return _safe_other(value, path, notes)


def _safe_str(value: str, path: str, notes: list[str]) -> str:
    if len(value) > QUARANTINE_TEXT_CHARS:
        notes.append(f"{path}: {len(value)} characters, the first {QUARANTINE_TEXT_CHARS} kept")
        value = value[:QUARANTINE_TEXT_CHARS]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        notes.append(f"{path}: lone surrogates (undecodable bytes) written as \\udcXX escapes")
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _safe_bytes(kept: bytes, length: int, path: str, notes: list[str]) -> dict[str, Any]:
    if length > len(kept):
        notes.append(f"{path}: {length} bytes, the first {len(kept)} kept")
    return {"$bytes_b64": base64.b64encode(kept).decode("ascii"), "$bytes_len": length}


def _safe_container(value: dict | list | tuple, path: str, depth: int, notes: list[str]) -> Any:
    if len(value) > QUARANTINE_MAX_ITEMS:
        notes.append(f"{path}: {len(value)} items, the first {QUARANTINE_MAX_ITEMS} kept")
    if isinstance(value, dict):
        items = list(value.items())[:QUARANTINE_MAX_ITEMS]
        out: dict[str, Any] = {}
        for key, item in items:
            name = _safe_str(key if isinstance(key, str) else repr(key), f"{path} key", notes)
            out[name] = _safe(item, f"{path}.{_cut_text(name, 80)}", depth + 1, notes)
        return out
    return [_safe(item, f"{path}[{i}]", depth + 1, notes) for i, item in enumerate(value[:QUARANTINE_MAX_ITEMS])]


def _safe_other(value: Any, path: str, notes: list[str]) -> dict[str, str]:
    kind = type(value).__name__
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__ must not fail the quarantine
        text = f"<unrepresentable {kind}: {type(exc).__name__}>"
    notes.append(f"{path}: {kind} is not JSON, written as its repr")
    return {"$repr": _safe_str(text, path, notes), "$type": kind}
