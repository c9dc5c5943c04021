"""Stage ``prepare``: ingest prompts, quarantine bad rows, split train/val/test, gate on leakage.

    python -m tasks.prepare --params params/default.yaml --out data/prepared --metrics metrics/prepare.json

Writes ``train/val/test.jsonl``, ``benchmarks/<name>.jsonl``, ``quarantine.jsonl`` (every rejected
row with its file, line and reason), ``leakage.jsonl`` and ``report.md``. Exits 1 with the report
when a gate fails (too many rejected rows, leakage above the limit); the outputs stay for inspection.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import mlflow

from grpoflow.config import Params
from grpoflow.data.prepare import Prepared, prepare
from grpoflow.data.report import prepare_report
from grpoflow.io import atomic_write, sha256_paths, write_json, write_jsonl
from tasks import tracking
from tasks.cli import EXIT_VERDICT, run_stage_cli, stage_parser


def write_outputs(prepared: Prepared, out: Path, report: str) -> str:
    """Write every output of the stage; returns the data hash of the split files."""
    for name, rows in prepared.splits.items():
        write_jsonl(out / f"{name}.jsonl", (r.to_dict() for r in rows))
    for name, rows in prepared.benchmarks.items():
        write_jsonl(out / "benchmarks" / f"{name}.jsonl", (r.to_dict() for r in rows))
    write_jsonl(out / "quarantine.jsonl", (q.to_dict() for q in prepared.quarantine))
    write_jsonl(out / "leakage.jsonl", (f.to_dict() for f in prepared.leaks))
    with atomic_write(out / "report.md") as fh:
        fh.write(report)
    hashed = [out / f"{n}.jsonl" for n in prepared.splits] + [out / "benchmarks" / f"{n}.jsonl" for n in prepared.benchmarks]
    return sha256_paths(hashed, root=out)


def main(args: argparse.Namespace, params: Params) -> None:
    out = Path(args.out)
    with tracking.stage_run("prepare", params, args.params):
        start = time.perf_counter()
        try:
            prepared = prepare(params.experiment.seed, params.data)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            mlflow.set_tag("gate", "error")
            raise SystemExit(2) from None
        report = prepare_report(prepared, params.data.leakage.report_examples)
        data_hash = write_outputs(prepared, out, report)
        metrics = {**prepared.summary(), "data_hash": data_hash, "seed": params.experiment.seed}
        metrics["seconds"] = round(time.perf_counter() - start, 3)
        write_json(args.metrics, metrics)
        mlflow.set_tags({"data_hash": data_hash, "gate": "passed" if metrics["passed"] else "failed"})
        mlflow.set_tags({f"license.{k}": str(v) for k, v in metrics["licenses"].items()})
        mlflow.log_metrics(tracking.numeric_metrics(metrics))
        for name in ("report.md", "quarantine.jsonl", "leakage.jsonl"):
            mlflow.log_artifact(str(out / name))
        mlflow.log_artifact(args.metrics)
    print(report)
    if not metrics["passed"]:
        print("prepare: a data gate failed (see above and data/prepared/report.md)", file=sys.stderr)
        raise SystemExit(EXIT_VERDICT)


if __name__ == "__main__":
    parser = stage_parser("prepare", __doc__)
    run_stage_cli(parser, main)
