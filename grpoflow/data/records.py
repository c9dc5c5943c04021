"""The one row schema every data source is normalised to."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Record:
    """A verifiable prompt: the model sees ``prompt``; verifiers compare to ``reference_answer``."""

    id: str
    prompt: str
    reference_answer: str
    solution: str | None
    source: str
    license: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rejected:
    """A row that did not make it into any split, and why: the quarantine file's row."""

    source_file: str
    line: int | None
    reason: str
    row: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
