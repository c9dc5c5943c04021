"""The prepare stage's core: ingest, de-duplicate, split. No I/O beyond what is passed in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from grpoflow.config import DataConfig
from grpoflow.data import synthetic
from grpoflow.data.records import Record, Rejected
from grpoflow.data.split import SPLITS, split_records
from grpoflow.data.text import normalize_text


@dataclass
class Prepared:
    splits: dict[str, list[Record]]
    quarantine: list[Rejected] = field(default_factory=list)

    def summary(self) -> dict:
        counts = {name: len(rows) for name, rows in self.splits.items()}
        kept = sum(counts.values())
        licenses = Counter(r.license for rows in self.splits.values() for r in rows)
        reasons = Counter(q.reason.split(":")[0] for q in self.quarantine)
        return {
            "rows": {**counts, "kept": kept, "quarantined": len(self.quarantine)},
            "quarantine_reasons": dict(sorted(reasons.items())),
            "licenses": dict(sorted(licenses.items())),
        }


def synthetic_records(seed: int, cfg: DataConfig) -> Iterable[Record]:
    for p in synthetic.generate(seed, cfg.synthetic):
        yield Record(
            id=f"synthetic-{seed}-{p.index}",
            prompt=p.question,
            reference_answer=str(p.final),
            solution=p.answer,
            source="synthetic",
            license=cfg.license,
        )


def deduplicate(records: Iterable[Record], source_file: str) -> tuple[list[Record], list[Rejected]]:
    """Keep the first of each normalised prompt; later copies go to quarantine, naming the first."""
    seen: dict[str, str] = {}
    kept: list[Record] = []
    rejected: list[Rejected] = []
    for line, rec in enumerate(records, start=1):
        key = normalize_text(rec.prompt)
        if key in seen:
            rejected.append(Rejected(source_file, line, f"duplicate_prompt: same as {seen[key]}", rec.to_dict()))
            continue
        seen[key] = rec.id
        kept.append(rec)
    return kept, rejected


def prepare(seed: int, cfg: DataConfig) -> Prepared:
    records, rejected = deduplicate(synthetic_records(seed, cfg), source_file="<synthetic>")
    splits = split_records(records, cfg.split)
    assert set(splits) == set(SPLITS)
    return Prepared(splits=splits, quarantine=rejected)
