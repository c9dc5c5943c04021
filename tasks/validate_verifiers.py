"""Stage ``validate_verifiers``: the gate between the data and any training on its rewards.

    python -m tasks.validate_verifiers --params params/default.yaml --data data/prepared \
        --out data/verifier_validation --metrics metrics/validate_verifiers.json

For every verifier in ``rewards``: scores gold answers in several surface forms, perturbed wrong
answers and malformed completions, on the val split and on each benchmark; writes precision,
recall, accuracy, throughput and the confusion cases; exits 1 below the thresholds in
``verifier_gate``, or when any reference answer cannot be parsed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


import verifiers
from grpoflow.config import Params
from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
from tasks.cli import EXIT_VERDICT, run_stage_cli, stage_parser
from verifiers.check import validate
from verifiers.sandbox import SandboxUnavailable


def reference_sets(data: Path, max_examples: int, seed: int) -> dict[str, list[dict]]:
    """The val split and every benchmark, each sampled down to ``max_examples`` rows."""
    sets = {"val": read_jsonl(data / "val.jsonl")}
    for path in sorted((data / "benchmarks").glob("*.jsonl")):
        sets[f"bench_{path.stem}"] = read_jsonl(path)
    rng = random.Random(seed)
    return {name: rng.sample(rows, max_examples) if len(rows) > max_examples else rows for name, rows in sets.items()}


def validate_verifier(verifier: verifiers.Verifier, rows: list[dict]) -> dict:
    """The verifier's gate result on one set of rows: its references, then its cases."""
    errors = [f"row {rows[i].get('id', i)}: {message}" for i, message in verifier.check_rows(rows)]
    try:
        result = validate(verifier.score, verifier.gate_cases(rows))
    except SandboxUnavailable as exc:
        return {"precision": 0.0, "recall": 0.0, "accuracy": 0.0, "reference_errors": [str(exc)], "confusions": []}
    return {**result.to_dict(), "reference_errors": errors[:20], "confusions": result.confusions}


def gate(results: dict[str, dict], params: Params) -> list[str]:
    g = params.verifier_gate
    failures = []
    for key, r in results.items():
        if r["reference_errors"]:
            failures.append(f"{key}: {len(r['reference_errors'])} reference answers cannot be parsed, e.g. {r['reference_errors'][0]}")
        if r["precision"] < g.min_precision:
            failures.append(f"{key}: precision {r['precision']:.4f} < verifier_gate.min_precision {g.min_precision}")
        if r["recall"] < g.min_recall:
            failures.append(f"{key}: recall {r['recall']:.4f} < verifier_gate.min_recall {g.min_recall}")
    return failures


def report(results: dict[str, dict], failures: list[str]) -> str:
    lines = [f"# Verifier validation: {'FAILED' if failures else 'PASSED'}", ""] + [f"- {f}" for f in failures]
    lines += ["", "| verifier.set | cases | precision | recall | accuracy | checks/s |", "|---|---|---|---|---|---|"]
    for key, r in results.items():
        lines.append(f"| {key} | {r.get('cases', '')} | {r['precision']:.4f} | {r['recall']:.4f} | {r['accuracy']:.4f} | {r.get('checks_per_second', '')} |")
    for key, r in results.items():
        if r["confusions"]:
            lines += ["", f"## Confusions: {key}", "", "```", *[json.dumps(c)[:400] for c in r["confusions"][:10]], "```"]
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow

    from tasks import tracking

    out = Path(args.out)
    with tracking.stage_run("validate_verifiers", params, args.params):
        sets = reference_sets(Path(args.data), params.verifier_gate.max_examples, params.experiment.seed)
        results: dict[str, dict] = {}
        for reward in params.rewards:
            verifier = verifiers.create(reward.name, reward.options, sandbox=params.sandbox,
                                        workers=params.verifier_gate.workers)
            for set_name, rows in sets.items():
                results[f"{reward.name}.{set_name}"] = validate_verifier(verifier, rows)
        failures = gate(results, params)
        text = report(results, failures)
        write_jsonl(out / "confusions.jsonl", ({"verifier": k, **c} for k, r in results.items() for c in r["confusions"]))
        with atomic_write(out / "report.md") as fh:
            fh.write(text)
        summary = {k: {m: v for m, v in r.items() if m not in ("confusions", "reference_errors")} for k, r in results.items()}
        metrics = {"verifiers": summary, "passed": not failures, "failures": failures}
        write_json(args.metrics, metrics)
        mlflow.set_tag("gate", "passed" if not failures else "failed")
        tracking.log_summary(metrics)
        mlflow.log_artifact(str(out / "report.md"))
        mlflow.log_artifact(args.metrics)
    print(text)
    if failures:
        print("validate_verifiers: the verifier gate failed (see above)", file=sys.stderr)
        raise SystemExit(EXIT_VERDICT)


if __name__ == "__main__":
    parser = stage_parser("validate_verifiers", __doc__)
    run_stage_cli(parser, main)
