"""Stage ``prepare``: generate or ingest prompts, quarantine bad rows, split train/val/test.

    python -m tasks.prepare --params params/default.yaml --out data/prepared --metrics metrics/prepare.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mlflow

from grpoflow.config import Params
from grpoflow.data.prepare import prepare
from grpoflow.io import sha256_paths, write_json, write_jsonl
from tasks import tracking
from tasks.cli import run_stage_cli, stage_parser


def main(args: argparse.Namespace, params: Params) -> None:
    out = Path(args.out)
    with tracking.stage_run("prepare", params, args.params):
        start = time.perf_counter()
        result = prepare(params.experiment.seed, params.data)
        for name, rows in result.splits.items():
            write_jsonl(out / f"{name}.jsonl", (r.to_dict() for r in rows))
        write_jsonl(out / "quarantine.jsonl", (q.to_dict() for q in result.quarantine))
        data_hash = sha256_paths([out], root=out)
        metrics = {
            **result.summary(),
            "data_hash": data_hash,
            "seed": params.experiment.seed,
            "seconds": round(time.perf_counter() - start, 3),
        }
        write_json(args.metrics, metrics)
        mlflow.set_tag("data_hash", data_hash)
        mlflow.log_dict(metrics["licenses"], "licenses.json")
        mlflow.log_metrics(tracking.numeric_metrics(metrics))
        mlflow.log_artifact(args.metrics)
        mlflow.log_artifact(str(out / "quarantine.jsonl"))
    print(f"prepare: {metrics['rows']} -> {out} (data hash {data_hash[:12]})")


if __name__ == "__main__":
    parser = stage_parser("prepare", __doc__)
    parser.add_argument("--out", default="data/prepared", help="directory for train/val/test/quarantine JSONL")
    run_stage_cli(parser, main)
