"""Stage ``prepare``: ingest prompts, quarantine bad rows, split train/val/test, gate on leakage.

    python -m tasks.prepare --params params/default.yaml --out data/prepared --metrics metrics/prepare.json

Writes ``train/val/test.jsonl``, ``pairs.jsonl`` (the reward model's preference pairs, empty where
no source has any), ``benchmarks/<name>.jsonl``, ``quarantine.jsonl`` (every rejected
row with its file, line and reason, strict JSON), ``leakage.jsonl`` and ``report.md``. Exits 3 with the
report when a gate fails (too many rejected rows, leakage above the limit; the outputs stay for
inspection, the console shows the report cut to a screen and its path), and 2 with one message for
bad input (a missing or unreadable file, an unsafe output name).
Rows with personal data are quarantined, redacted or passed as ``data.pii`` says; the scan's counts
by type go into the metrics beside ``data_hash``, and into the MLflow tag ``pii``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grpoflow.config import Params
from grpoflow.data.prepare import PAIRS_FILE, Prepared, prepare
from grpoflow.data.report import prepare_report
from grpoflow.io import atomic_write, sha256_paths, write_json, write_jsonl
from tasks.cli import EXIT_BAD_INPUT, print_verdict, run_stage_cli, stage_parser


def output_path(out: Path, *parts: str) -> Path:
    """``out/<parts>``, refused unless each part is a plain name and the file stays inside ``out``.

    The schema already admits only safe benchmark names; this is the second line of defence, so
    no name, however it got here, writes outside the stage's folder. The parent folder is resolved
    (symlinks followed) but not the file itself: DVC may link a cached output there, and
    atomic_write replaces the link rather than writing through it.
    """
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\\" in part or "\0" in part:
            raise ValueError(f"output {'/'.join(parts)!r}: {part!r} is not a plain file or folder name")
    path = out.joinpath(*parts)
    if not path.parent.resolve().is_relative_to(out.resolve()):
        raise ValueError(f"output {'/'.join(parts)!r} would be written outside {out}")
    return path


def output_paths(prepared: Prepared, out: Path) -> dict[str, Path]:
    """Every file the stage writes, by role, each checked by :func:`output_path`."""
    paths = {name: output_path(out, f"{name}.jsonl") for name in prepared.splits}
    for name in prepared.benchmarks:
        paths[f"benchmarks/{name}"] = output_path(out, "benchmarks", f"{name}.jsonl")
    for name in (PAIRS_FILE, "quarantine.jsonl", "leakage.jsonl", "report.md"):
        paths[name] = output_path(out, name)
    return paths


def write_outputs(prepared: Prepared, out: Path, report: str) -> str:
    """Write every output of the stage (strict JSON); returns the data hash of the split files."""
    paths = output_paths(prepared, out)
    for name, rows in prepared.splits.items():
        write_jsonl(paths[name], (r.to_dict() for r in rows), allow_nan=False)
    for name, rows in prepared.benchmarks.items():
        write_jsonl(paths[f"benchmarks/{name}"], (r.to_dict() for r in rows), allow_nan=False)
    write_jsonl(paths[PAIRS_FILE], (p.to_dict() for p in prepared.pairs), allow_nan=False)  # reward_model's
    write_jsonl(paths["quarantine.jsonl"], (q.to_dict() for q in prepared.quarantine), allow_nan=False)
    write_jsonl(paths["leakage.jsonl"], (f.to_dict() for f in prepared.leaks), allow_nan=False)
    with atomic_write(paths["report.md"], "wb") as fh:  # UTF-8 whatever the locale: prompts are any text
        fh.write(report.encode("utf-8"))
    hashed = [paths[n] for n in prepared.splits] + [paths[f"benchmarks/{n}"] for n in prepared.benchmarks]
    hashed += [paths[PAIRS_FILE]] if prepared.pairs else []  # a set without pairs keeps its data hash
    return sha256_paths(hashed, root=out)


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow

    from grpoflow.data.pii import finders
    from tasks import notes, tracking

    finders(tuple(params.data.pii.entities))  # while the process has one thread: grpoflow/data/pii.py says why
    out = Path(args.out)
    with tracking.stage_run("prepare", params, args.params):
        start = time.perf_counter()
        try:
            prepared = prepare(params.experiment.seed, params.data)
            output_paths(prepared, out)
        except (FileNotFoundError, ValueError) as exc:  # bad input: a file, a row layout, an output name
            print(f"error: {exc}", file=sys.stderr)
            mlflow.set_tag("gate", "error")
            raise SystemExit(EXIT_BAD_INPUT) from None
        report = prepare_report(prepared, params.data.leakage.report_examples)
        data_hash = write_outputs(prepared, out, report)
        metrics = {**prepared.summary(), "data_hash": data_hash, "seed": params.experiment.seed}
        metrics["seconds"] = round(time.perf_counter() - start, 3)
        write_json(args.metrics, metrics)
        pii = metrics["pii"]  # the personal-data scan, recorded beside the hash of the data it let through
        mlflow.set_tags(
            {
                "data_hash": data_hash,
                "gate": "passed" if metrics["passed"] else "failed",
                "pii": f"{pii['rows_with_pii']} of {pii['rows_scanned']} rows ({pii['mode']})",
            }
        )
        mlflow.set_tags({f"license.{k}": str(v) for k, v in metrics["licenses"].items()})
        mlflow.set_tag(tracking.NOTE, notes.prepare_note(metrics))
        tracking.log_summary(metrics)
        for name in ("report.md", "quarantine.jsonl", "leakage.jsonl"):
            mlflow.log_artifact(str(out / name))
        mlflow.log_artifact(args.metrics)
    print_verdict("prepare", report, out / "report.md", metrics["passed"])


if __name__ == "__main__":
    parser = stage_parser("prepare", __doc__)
    run_stage_cli(parser, main)
