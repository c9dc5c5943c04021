"""The prepare stage's core: ingest every source, quarantine bad rows, split, gate on leakage.

Returns everything the stage writes; decides nothing about files, tracking or exit codes
beyond the verdict of its two gates (rejected share, leakage). Preference pairs (``data.pairs``)
and benchmarks take the same path as prompts: ingested with the same row checks, their rejected
rows quarantined with file, line and reason, their rejected share judged by the same gate; the
pairs' prompts are leak-checked with the train prompts.

A file source must resolve (symlinks followed) inside the project directory, so that a link or
``../`` cannot put a host file's lines into the quarantine (which is logged), unless the source
says ``allow_outside_project: true``. A ``package:<dist>/<file>`` path is exempt: it names a file
of an installed distribution by the distribution's own file list, an explicit choice that cannot
be a stray link, and the environment it lives in is usually outside the checkout.
"""

from __future__ import annotations

import decimal
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from grpoflow.config import DataConfig, SourceConfig
from grpoflow.data import synthetic, synthetic_code
from grpoflow.data.ingest import Ingested, RawRow, ingest, ingest_pairs, read_hub, read_raw
from grpoflow.data.leakage import Leak, leakage
from grpoflow.data.pii import PiiScan
from grpoflow.data.records import PairRecord, Record, Rejected
from grpoflow.data.split import split_records
from grpoflow.data.text import match_key
from grpoflow.package_files import PACKAGE_PREFIX, resolve_file

PAIRS_FILE = "pairs.jsonl"  # Prepared.pairs, written beside train/val/test.jsonl in the stage's folder
# The row form each generator's rows are in: they go through the same checks as a file's rows.
GENERATED_FORMATS = {"synthetic": "gsm8k", "synthetic_code": "code"}


@dataclass(frozen=True)
class FoundLeak:
    """A train row (or preference pair) that leaks into a reference set, with both texts for the report.

    ``train_set`` says which: ``"train"`` (a train split row) or ``"pairs"`` (a preference pair's prompt).
    """

    reference_set: str
    leak: Leak
    train: Record | PairRecord
    reference: Record
    train_set: str = "train"

    def to_dict(self) -> dict:
        """The leak with both texts, as a leakage.jsonl row."""
        return {
            "reference_set": self.reference_set,
            "train_set": self.train_set,
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
    pairs: list[PairRecord] = field(default_factory=list)  # written to PAIRS_FILE
    pair_rows: dict[str, int] = field(default_factory=dict)  # rows read per data.pairs source
    benchmark_rows: dict[str, int] = field(default_factory=dict)  # rows read per benchmark
    resolved_files: dict[str, str] = field(default_factory=dict)  # package:<dist>/<file> -> the file read
    pii: PiiScan = field(default_factory=PiiScan)  # the personal-data scan of every admitted row (data.pii)

    def summary(self) -> dict:
        """The stage's metrics: row counts, quarantine reasons, licences, leakage, verdict."""
        counts = {name: len(rows) for name, rows in self.splits.items()}
        licenses = Counter(r.license for rows in self.splits.values() for r in rows)
        for rows in self.benchmarks.values():
            licenses.update(r.license for r in rows)
        licenses.update(p.license for p in self.pairs)
        reasons = Counter(q.reason.split(":")[0] for q in self.quarantine)
        return {
            "rows": {**counts, "kept": sum(counts.values()), "quarantined": len(self.quarantine)},
            "sources": self.source_rows,
            "benchmarks": {name: len(rows) for name, rows in self.benchmarks.items()},
            "pairs": {"kept": len(self.pairs), "sources": self.pair_rows},
            "resolved_files": self.resolved_files,
            "pii": self.pii.summary(),
            "quarantine_reasons": dict(sorted(reasons.items())),
            "licenses": dict(sorted(licenses.items())),
            "leakage": {
                "leaking_train_rows": len({f.train.id for f in self.leaks if f.train_set == "train"}),
                "leaking_pairs": len({f.train.id for f in self.leaks if f.train_set == "pairs"}),
                "by_kind": dict(Counter(f.leak.kind for f in self.leaks)),
                "by_reference_set": dict(Counter(f.reference_set for f in self.leaks)),
            },
            "passed": not self.failures,
            "failures": self.failures,
        }


class OutsideProjectError(FileNotFoundError, ValueError):
    """A source's file resolves outside the project directory and the source does not allow it.

    For the project such a file is not there: whoever looks for missing inputs (the flow, before
    any stage) lists it with them, and the prepare stage exits as on any bad input.
    """


def source_path(src: SourceConfig, root: Path) -> Path:
    """A file source's file: its path (relative to ``root``) or ``package:<dist>/<file>`` resolved to
    the file inside the installed package; a missing package or file is a clear FileNotFoundError.

    A plain path is returned resolved (symlinks followed), and must lie inside ``root`` unless the
    source has ``allow_outside_project``: :class:`OutsideProjectError` otherwise. The resolved path
    is what gets read, so a link the check followed is not followed again (the checkout is trusted
    not to change under a running stage).
    """
    try:
        path = resolve_file(str(src.path))
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"data source {src.label!r} (path {src.path}): {exc}") from None
    if str(src.path).startswith(PACKAGE_PREFIX):
        return path
    resolved = (path if path.is_absolute() else root / path).resolve()
    if not src.allow_outside_project and not resolved.is_relative_to(root.resolve()):
        raise OutsideProjectError(
            f"data source {src.label!r} (path {src.path}): resolves to {resolved}, outside the project "
            f"directory {root.resolve()}; move the file into the project, or set allow_outside_project: true "
            "on this source"
        )
    return resolved


def _raw_rows(src: SourceConfig, cfg: DataConfig, root: Path) -> tuple[Iterator[RawRow], str]:
    """A file or hub source's rows, streamed (a rejected row is kept only cut down), and its name."""
    if src.kind == "file":
        rows = read_raw(
            source_path(src, root),
            max_row_bytes=cfg.max_row_bytes,
            max_file_bytes=cfg.max_file_bytes,
            max_file_lines=cfg.max_file_lines,
            max_rows=src.limit,
        )
        return islice(rows, src.limit), str(src.path)
    rows = read_hub(src.hub_name, src.subset, src.split)  # type: ignore[arg-type]
    return islice(rows, src.limit), f"hub:{src.hub_name}/{src.subset or ''}:{src.split}"


def _generated_rows(src: SourceConfig, seed: int, cfg: DataConfig) -> list[RawRow]:
    """A generator source's rows, as raw rows like a file's (``limit`` applied)."""
    if src.kind == "synthetic":
        rows = [
            RawRow(p.index + 1, {"id": f"synthetic-{seed}-{p.index}", "question": p.question, "answer": p.answer})
            for p in synthetic.generate(seed, cfg.synthetic)
        ]
    else:
        rows = [RawRow(t.index + 1, t.row(seed)) for t in synthetic_code.generate(seed, cfg.synthetic_code)]
    return rows[: src.limit] if src.limit else rows


def _source_rows(src: SourceConfig, seed: int, cfg: DataConfig, root: Path) -> tuple[Iterable[RawRow], str, str]:
    """A source's raw rows, the file name its quarantined rows name, and its licence."""
    if src.kind in GENERATED_FORMATS:
        return _generated_rows(src, seed, cfg), f"<{src.kind}>", cfg.synthetic_license
    rows, file_name = _raw_rows(src, cfg, root)
    return rows, file_name, src.license or ""


def load_source(src: SourceConfig, seed: int, cfg: DataConfig, root: Path) -> tuple[Ingested[Record], int]:
    """One source's rows, validated and normalised, and how many rows were read."""
    rows, file_name, license = _source_rows(src, seed, cfg, root)
    fmt = GENERATED_FORMATS.get(src.kind, src.format)
    if fmt == "pairs":
        raise ValueError(f"source {src.label!r} has format pairs: preference pairs belong in data.pairs")
    limit = cfg.max_prompt_chars
    got = ingest(
        rows,
        fmt,
        source=src.label,
        source_file=file_name,
        license=license,
        max_prompt_chars=limit,
        question_field=src.question_field,
        answer_field=src.answer_field,
    )
    return got, got.read


def load_pairs(src: SourceConfig, cfg: DataConfig, root: Path) -> tuple[Ingested[PairRecord], int]:
    """One ``data.pairs`` source's preference pairs, validated like prompts, and how many rows were read."""
    if src.kind not in ("file", "hub") or src.format != "pairs":
        raise ValueError(
            f"data.pairs source {src.label!r} must be a file or hub source with format: pairs "
            f"(got kind {src.kind!r}, format {src.format!r})"
        )
    rows, file_name, license = _source_rows(src, 0, cfg, root)
    limit = cfg.max_prompt_chars
    got = ingest_pairs(rows, source=src.label, source_file=file_name, license=license, max_prompt_chars=limit)
    return got, got.read


def deduplicate(
    records: list[Record], origin: dict[str, tuple[str, int | None]]
) -> tuple[list[Record], list[Rejected]]:
    """Keep the first of each normalised prompt; later copies go to quarantine, naming the first, as
    ``conflicting_duplicate`` where the two answers differ (one of the two labels is wrong, and the
    kept one may be it)."""
    seen: dict[str, Record] = {}
    kept: list[Record] = []
    rejected: list[Rejected] = []
    for rec in records:
        key = match_key(rec.prompt)
        first = seen.get(key)
        if first is None:
            seen[key] = rec
            kept.append(rec)
            continue
        src_file, line = origin.get(rec.id, ("", None))
        reason = f"duplicate_prompt: same as {first.id}"
        if not _same_answer(first, rec):
            reason = (
                f"conflicting_duplicate: same prompt as {first.id}, which is kept with answer "
                f"{first.reference_answer!r}; this row's is {rec.reference_answer!r}"
            )
        rejected.append(Rejected(src_file, line, reason, rec.to_dict()))
    return kept, rejected


def _same_answer(a: Record, b: Record) -> bool:
    """Whether two copies of a math prompt agree on its answer (``3`` and ``3.0`` do; answers that are not
    numbers compare as de-duplication compares prompts). A code row's reference is one program among many
    that pass its tests, so two code copies always agree."""
    if a.task == "code" or a.reference_answer == b.reference_answer:
        return True
    try:  # a numeric reference is kept as a plain number (grpoflow.data.normalise.final_answer)
        return decimal.Decimal(a.reference_answer or "") == decimal.Decimal(b.reference_answer or "")
    except decimal.InvalidOperation:
        return match_key(a.reference_answer or "") == match_key(b.reference_answer or "")


def _check_rejected_share(what: str, read: int, rejected: int, limit: float) -> str | None:
    """The gate's verdict on one source (``what`` names it and its file): None if it passes."""
    share = rejected / read if read else 1.0
    if read == 0:
        return f"{what}: no rows read (empty file or limit 0)"
    if share > limit:
        return (
            f"{what}: {rejected} of {read} rows ({share:.1%}) were quarantined, above "
            f"data.max_rejected_fraction={limit:.1%}; see quarantine.jsonl for each row's file, line and reason"
        )
    return None


def _admit(
    prepared: Prepared,
    src: SourceConfig,
    got: Ingested[Record] | Ingested[PairRecord],
    read: int,
    counts: dict[str, int],
) -> None:
    """Quarantine a source's rejected rows and count the rows it read. Rows with personal data are
    quarantined or redacted first (``data.pii``, grpoflow/data/pii.py)."""
    prepared.pii.screen(got)
    prepared.quarantine.extend(got.rejected)
    counts[src.label] = read


def _judge(prepared: Prepared, src: SourceConfig, source_file: str, read: int, rejected: int, limit: float, role: str):
    """Judge a source's rejected share (``role`` says what the source is, in the verdict: a source, a
    benchmark, a pairs source)."""
    what = f"{role} {src.label!r} ({source_file})" if source_file else f"{role} {src.label!r}"
    verdict = _check_rejected_share(what, read, rejected, limit)
    if verdict:
        prepared.failures.append(verdict)


def _leak_candidates(prepared: Prepared) -> list[tuple[str, Record | PairRecord]]:
    """What the leakage gate checks: train rows and preference pairs, each with its set's name."""
    train: list[tuple[str, Record | PairRecord]] = [("train", r) for r in prepared.splits["train"]]
    return train + [("pairs", p) for p in prepared.pairs]


def find_split_leaks(prepared: Prepared, cfg: DataConfig) -> list[FoundLeak]:
    """Train rows and preference pairs whose prompts leak into val, test or a benchmark, by every
    check the config enables (a pair's prompt is checked exactly as a train prompt is)."""
    candidates = _leak_candidates(prepared)
    references = {"val": prepared.splits["val"], "test": prepared.splits["test"], **prepared.benchmarks}
    found: list[FoundLeak] = []
    texts = [row.prompt for _, row in candidates]
    lk = cfg.leakage
    for name, refs in references.items():
        for leak in leakage(
            texts,
            [r.prompt for r in refs],
            ngram=lk.ngram,
            ngram_min_overlap=lk.ngram_min_overlap,
            near_threshold=lk.near_threshold,
            numbers=lk.numbers,
        ):
            train_set, row = candidates[leak.train_index]
            found.append(FoundLeak(name, leak, row, refs[leak.reference_index], train_set))
    return found


def _apply_leakage_gate(prepared: Prepared, cfg: DataConfig) -> None:
    prepared.leaks = find_split_leaks(prepared, cfg)
    leaking = {(f.train_set, f.train.id): f for f in prepared.leaks}
    if cfg.leakage.action == "drop":
        prepared.splits["train"] = [r for r in prepared.splits["train"] if ("train", r.id) not in leaking]
        prepared.pairs = [p for p in prepared.pairs if ("pairs", p.id) not in leaking]
        for f in leaking.values():
            reason = f"leak_{f.leak.kind}: matches {f.reference_set} row {f.reference.id} (score {f.leak.score})"
            prepared.quarantine.append(Rejected(f.train.source, None, reason, f.train.to_dict()))
    elif len(leaking) > cfg.leakage.max_leaks:
        pairs = sum(1 for train_set, _ in leaking if train_set == "pairs")
        what = f"{len(leaking) - pairs} train rows" + (f" and {pairs} preference pairs" if pairs else "")
        prepared.failures.append(
            f"leakage gate: {what} leak into val/test/benchmarks "
            f"(max_leaks={cfg.leakage.max_leaks}); see the leakage report, or set data.leakage.action: drop"
        )


def _resolved_files(cfg: DataConfig, root: Path) -> dict[str, str]:
    """Each ``package:`` path of the config and the file it names, for the metrics and the report.

    Resolved before anything is read, so a missing package stops the stage at once.
    """
    sources = [*cfg.sources, *cfg.benchmarks, *cfg.pairs]
    return {
        str(src.path): str(source_path(src, root))
        for src in sources
        if src.kind == "file" and str(src.path).startswith(PACKAGE_PREFIX)
    }


def prepare(seed: int, cfg: DataConfig, root: str | Path = ".") -> Prepared:
    """Ingest every source and preference pair, quarantine bad rows, de-duplicate, split and apply both gates."""
    root = Path(root)
    pooled: list[Record] = []
    origin: dict[str, tuple[str, int | None]] = {}
    prepared = Prepared(splits={}, resolved_files=_resolved_files(cfg, root), pii=PiiScan(cfg.pii))
    limit = cfg.max_rejected_fraction
    loaded = []
    for src in cfg.sources:
        got, read = load_source(src, seed, cfg, root)
        _admit(prepared, src, got, read, prepared.source_rows)
        pooled.extend(got.records)
        origin.update(got.origin)
        loaded.append((src, got, read))
    records, dupes = deduplicate(pooled, origin)
    prepared.quarantine.extend(dupes)
    kept = {id(r) for r in records}
    for src, got, read in loaded:
        # A later copy counts against its own source: a file that is mostly copies fails like any other. A
        # generator's collisions do not: its num_examples counts the problems before de-duplication.
        copies = 0 if src.kind in GENERATED_FORMATS else sum(id(r) not in kept for r in got.records)
        _judge(prepared, src, got.source_file, read, len(got.rejected) + copies, limit, "source")
    prepared.splits = split_records(records, cfg.split)
    for bench in cfg.benchmarks:
        got, read = load_source(bench, seed, cfg, root)
        _admit(prepared, bench, got, read, prepared.benchmark_rows)
        _judge(prepared, bench, got.source_file, read, len(got.rejected), limit, "benchmark")
        prepared.benchmarks[bench.label] = got.records
    for src in cfg.pairs:
        pairs, read = load_pairs(src, cfg, root)
        _admit(prepared, src, pairs, read, prepared.pair_rows)
        _judge(prepared, src, pairs.source_file, read, len(pairs.rejected), limit, "data.pairs source")
        prepared.pairs.extend(pairs.records)
    _apply_leakage_gate(prepared, cfg)
    return prepared
