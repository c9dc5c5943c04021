"""The prepare stage's core: ingest every source, quarantine bad rows, split, gate on leakage.

Returns everything the stage writes; decides nothing about files, tracking or exit codes
beyond the verdict of its two gates (rejected share, leakage).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from grpoflow.config import DataConfig, SourceConfig
from grpoflow.data import synthetic
from grpoflow.data.ingest import Ingested, RawRow, ingest, read_hub, read_raw
from grpoflow.data.leakage import Leak, leakage
from grpoflow.data.records import Record, Rejected
from grpoflow.data.split import split_records
from grpoflow.data.text import normalize_text


@dataclass(frozen=True)
class FoundLeak:
    """A train row that leaks into a reference set, with both texts for the report."""

    reference_set: str
    leak: Leak
    train: Record
    reference: Record

    def to_dict(self) -> dict:
        """The leak with both texts, as a leakage.jsonl row."""
        return {
            "reference_set": self.reference_set,
            "kind": self.leak.kind,
            "score": self.leak.score,
            "train_id": self.train.id,
            "train_prompt": self.train.prompt,
            "reference_id": self.reference.id,
            "reference_prompt": self.reference.prompt,
        }


@dataclass
class Prepared:
    """Everything the prepare stage writes: splits, benchmarks, quarantine, leaks, gate verdicts."""

    splits: dict[str, list[Record]]
    benchmarks: dict[str, list[Record]] = field(default_factory=dict)
    quarantine: list[Rejected] = field(default_factory=list)
    leaks: list[FoundLeak] = field(default_factory=list)
    source_rows: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # gate verdicts; empty means pass

    def summary(self) -> dict:
        """The stage's metrics: row counts, quarantine reasons, licences, leakage, verdict."""
        counts = {name: len(rows) for name, rows in self.splits.items()}
        licenses = Counter(r.license for rows in self.splits.values() for r in rows)
        for rows in self.benchmarks.values():
            licenses.update(r.license for r in rows)
        reasons = Counter(q.reason.split(":")[0] for q in self.quarantine)
        return {
            "rows": {**counts, "kept": sum(counts.values()), "quarantined": len(self.quarantine)},
            "sources": self.source_rows,
            "benchmarks": {name: len(rows) for name, rows in self.benchmarks.items()},
            "quarantine_reasons": dict(sorted(reasons.items())),
            "licenses": dict(sorted(licenses.items())),
            "leakage": {
                "leaking_train_rows": len({f.train.id for f in self.leaks}),
                "by_kind": dict(Counter(f.leak.kind for f in self.leaks)),
                "by_reference_set": dict(Counter(f.reference_set for f in self.leaks)),
            },
            "passed": not self.failures,
            "failures": self.failures,
        }


def _raw_rows(src: SourceConfig, cfg: DataConfig, root: Path) -> tuple[Iterator[RawRow], str]:
    """A file or hub source's rows, streamed (a rejected row is kept only cut down), and its name."""
    if src.kind == "file":
        path = Path(src.path)  # type: ignore[arg-type]
        path = path if path.is_absolute() else root / path
        rows = read_raw(path, max_row_bytes=cfg.max_row_bytes)
        name = str(src.path)
    else:
        rows = read_hub(src.hub_name, src.subset, src.split)  # type: ignore[arg-type]
        name = f"hub:{src.hub_name}/{src.subset or ''}:{src.split}"
    return islice(rows, src.limit), name


def load_source(src: SourceConfig, seed: int, cfg: DataConfig, root: Path) -> tuple[Ingested, int]:
    """One source's rows, validated and normalised, and how many rows were read."""
    rows: Iterable[RawRow]
    if src.kind == "synthetic":
        gen = synthetic.generate(seed, cfg.synthetic)
        rows = [
            RawRow(p.index + 1, {"id": f"synthetic-{seed}-{p.index}", "question": p.question, "answer": p.answer})
            for p in gen
        ]
        rows = rows[: src.limit] if src.limit else rows
        file_name, license = "<synthetic>", cfg.synthetic_license
    else:
        rows, file_name = _raw_rows(src, cfg, root)
        license = src.license or ""
    limit = cfg.max_prompt_chars
    got = ingest(rows, src.format, source=src.label, source_file=file_name, license=license, max_prompt_chars=limit)
    return got, got.read


def deduplicate(
    records: list[Record], origin: dict[str, tuple[str, int | None]]
) -> tuple[list[Record], list[Rejected]]:
    """Keep the first of each normalised prompt; later copies go to quarantine, naming the first."""
    seen: dict[str, str] = {}
    kept: list[Record] = []
    rejected: list[Rejected] = []
    for rec in records:
        key = normalize_text(rec.prompt)
        if key in seen:
            src_file, line = origin.get(rec.id, ("", None))
            rejected.append(Rejected(src_file, line, f"duplicate_prompt: same as {seen[key]}", rec.to_dict()))
            continue
        seen[key] = rec.id
        kept.append(rec)
    return kept, rejected


def _check_rejected_share(src: SourceConfig, read: int, rejected: int, limit: float) -> str | None:
    share = rejected / read if read else 1.0
    if read == 0:
        return f"source {src.label!r}: no rows read (empty file or limit 0)"
    if share > limit:
        return (
            f"source {src.label!r}: {rejected} of {read} rows ({share:.1%}) were quarantined, above "
            f"data.max_rejected_fraction={limit:.1%}; see quarantine.jsonl for each row's file, line and reason"
        )
    return None


def find_split_leaks(prepared: Prepared, cfg: DataConfig) -> list[FoundLeak]:
    """Train rows that leak into val, test or a benchmark, by every check the config enables."""
    train = prepared.splits["train"]
    references = {"val": prepared.splits["val"], "test": prepared.splits["test"], **prepared.benchmarks}
    found: list[FoundLeak] = []
    train_texts = [r.prompt for r in train]
    lk = cfg.leakage
    for name, refs in references.items():
        for leak in leakage(
            train_texts,
            [r.prompt for r in refs],
            ngram=lk.ngram,
            ngram_min_overlap=lk.ngram_min_overlap,
            near_threshold=lk.near_threshold,
        ):
            found.append(FoundLeak(name, leak, train[leak.train_index], refs[leak.reference_index]))
    return found


def _apply_leakage_gate(prepared: Prepared, cfg: DataConfig) -> None:
    prepared.leaks = find_split_leaks(prepared, cfg)
    leaking = {f.train.id: f for f in prepared.leaks}
    if cfg.leakage.action == "drop":
        prepared.splits["train"] = [r for r in prepared.splits["train"] if r.id not in leaking]
        for f in leaking.values():
            reason = f"leak_{f.leak.kind}: matches {f.reference_set} row {f.reference.id} (score {f.leak.score})"
            prepared.quarantine.append(Rejected(f.train.source, None, reason, f.train.to_dict()))
    elif len(leaking) > cfg.leakage.max_leaks:
        prepared.failures.append(
            f"leakage gate: {len(leaking)} train rows leak into val/test/benchmarks "
            f"(max_leaks={cfg.leakage.max_leaks}); see the leakage report, or set data.leakage.action: drop"
        )


def prepare(seed: int, cfg: DataConfig, root: str | Path = ".") -> Prepared:
    """Ingest every source, quarantine bad rows, de-duplicate, split and apply both gates."""
    root = Path(root)
    pooled: list[Record] = []
    origin: dict[str, tuple[str, int | None]] = {}
    prepared = Prepared(splits={})
    for src in cfg.sources:
        got, read = load_source(src, seed, cfg, root)
        prepared.quarantine.extend(got.rejected)
        prepared.source_rows[src.label] = read
        verdict = _check_rejected_share(src, read, len(got.rejected), cfg.max_rejected_fraction)
        if verdict:
            prepared.failures.append(verdict)
        pooled.extend(got.records)
        origin.update(got.origin)
    records, dupes = deduplicate(pooled, origin)
    prepared.quarantine.extend(dupes)
    prepared.splits = split_records(records, cfg.split)
    for bench in cfg.benchmarks:
        got, _ = load_source(bench, seed, cfg, root)
        prepared.benchmarks[bench.label] = got.records
        prepared.quarantine.extend(got.rejected)
    _apply_leakage_gate(prepared, cfg)
    return prepared
