"""Ingestion: raw rows from files or a dataset hub, validated and normalised to :class:`Record`.

Two input forms are understood:
- **gsm8k**: ``question`` and ``answer``, the answer a worked solution whose last line is
  ``#### <number>`` (numbers may carry thousands commas; ``<<a*b=c>>`` calculator annotations are
  kept in the solution and stripped nowhere else);
- **math** (Hendrycks MATH): ``problem`` and ``solution``, the final answer in the last ``\\boxed{...}``.

A row that fails validation is never dropped: it becomes a :class:`Rejected` naming the source
file, the line (1-based; for CSV the file line, header counted) and the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from grpoflow.data.records import Record, Rejected
from verifiers.extract import last_boxed

FIELDS = {"gsm8k": ("question", "answer"), "math": ("problem", "solution")}
_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$")
_NUMBER = re.compile(r"^-?\d+(?:,\d{3})*(?:\.\d+)?$|^-?\d*\.\d+$")


class RowError(ValueError):
    """One row's problem; ``reason`` is ``kind: detail`` (the kind is what the summary counts)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.reason = f"{kind}: {detail}"


def gsm8k_final_answer(answer: str) -> str:
    """The number after ``####`` on the last line, commas removed; raises :class:`RowError`."""
    lines = [line for line in answer.strip().splitlines() if line.strip()]
    match = _GSM8K_FINAL.search(lines[-1]) if lines else None
    if not match:
        raise RowError("unparseable_answer", "no '#### <number>' final line")
    value = match.group(1).replace("$", "").strip()
    if not _NUMBER.match(value):
        raise RowError("unparseable_answer", f"final answer {match.group(1)!r} is not a number")
    return value.replace(",", "")


def _text_field(raw: dict[str, Any], name: str) -> str:
    if name not in raw or raw[name] is None:
        raise RowError("missing_field", name)
    value = raw[name]
    if not isinstance(value, str):
        raise RowError("wrong_type", f"{name} is {type(value).__name__}, expected str")
    if not value.strip():
        raise RowError("empty_field", name)
    return value.strip()


def normalise_row(raw: Any, fmt: str, *, row_id: str, source: str, license: str) -> Record:
    """One raw row in ``fmt`` form as a :class:`Record`, or :class:`RowError`."""
    if not isinstance(raw, dict):
        raise RowError("wrong_type", f"row is {type(raw).__name__}, expected an object")
    prompt_field, solution_field = FIELDS[fmt]
    prompt = _text_field(raw, prompt_field)
    solution = _text_field(raw, solution_field)
    if fmt == "gsm8k":
        answer = gsm8k_final_answer(solution)
    else:
        answer = last_boxed(solution)
        if not answer:
            raise RowError("unparseable_answer", "no \\boxed{...} final answer in solution")
    rid = raw.get("id") if raw.get("id") not in (None, "") else row_id
    return Record(id=str(rid), prompt=prompt, reference_answer=answer, solution=solution, source=source, license=license)


@dataclass(frozen=True)
class RawRow:
    line: int | None
    value: Any  # the parsed row, or the exception that stopped it from parsing


def read_raw(path: str | Path) -> Iterator[RawRow]:
    """Rows of a JSONL, JSON (a list), Parquet or CSV file, each with its line number."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield RawRow(n, json.loads(line))
                    except json.JSONDecodeError as exc:
                        yield RawRow(n, RowError("invalid_json", str(exc)))
    elif suffix == ".json":
        for n, row in enumerate(json.loads(path.read_text(encoding="utf-8")), start=1):
            yield RawRow(n, row)
    elif suffix in (".parquet", ".csv"):
        import pandas as pd

        frame = pd.read_parquet(path) if suffix == ".parquet" else pd.read_csv(path, dtype=str, keep_default_na=False)
        offset = 2 if suffix == ".csv" else 1  # CSV: line 1 is the header
        for n, row in enumerate(frame.to_dict(orient="records")):
            yield RawRow(n + offset, {k: (None if v == "" and suffix == ".csv" else v) for k, v in row.items()})
    else:
        raise ValueError(f"data file {path}: unsupported format {suffix!r} (use .jsonl, .json, .parquet or .csv)")


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


@dataclass
class Ingested:
    records: list[Record]
    rejected: list[Rejected]
    origin: dict[str, tuple[str, int | None]]  # record id -> (source file, line)


def ingest(rows: Iterable[RawRow], fmt: str, *, source: str, source_file: str, license: str) -> Ingested:
    """Validate and normalise rows; invalid ones and repeated ids become :class:`Rejected`."""
    records: list[Record] = []
    rejected: list[Rejected] = []
    seen_ids: dict[str, int | None] = {}
    for raw in rows:
        try:
            if isinstance(raw.value, Exception):
                raise raw.value
            rec = normalise_row(raw.value, fmt, row_id=f"{source}-{raw.line}", source=source, license=license)
            if rec.id in seen_ids:
                raise RowError("duplicate_id", f"id {rec.id!r} already used on line {seen_ids[rec.id]}")
        except RowError as err:
            payload = raw.value if isinstance(raw.value, dict) else {"raw": repr(raw.value)}
            rejected.append(Rejected(source_file, raw.line, err.reason, payload))
            continue
        seen_ids[rec.id] = raw.line
        records.append(rec)
    return Ingested(records, rejected, {rid: (source_file, line) for rid, line in seen_ids.items()})
