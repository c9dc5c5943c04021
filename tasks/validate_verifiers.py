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

import mlflow

import verifiers
from grpoflow.config import Params
from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
from grpoflow.verifier_check import CODE_CASES, build_cases, check_references, format_cases, validate
from tasks import tracking
from tasks.cli import EXIT_VERDICT, run_stage_cli, stage_parser
from verifiers import math as math_verifier
from verifiers.code import score_code
from verifiers.sandbox import Limits, SandboxUnavailable


def reference_sets(data: Path, max_examples: int, seed: int) -> dict[str, list[dict]]:
    sets = {"val": read_jsonl(data / "val.jsonl")}
    for path in sorted((data / "benchmarks").glob("*.jsonl")):
        sets[f"bench_{path.stem}"] = read_jsonl(path)
    rng = random.Random(seed)
    return {name: rng.sample(rows, max_examples) if len(rows) > max_examples else rows for name, rows in sets.items()}


def validate_text_verifier(name: str, rows: list[dict], params: Params) -> dict:
    refs = [r["reference_answer"] for r in rows]
    sols = [r.get("solution") for r in rows]
    if name == "math":
        errors = check_references(refs, math_verifier.check_reference)
        cases = build_cases(refs, sols)
        workers = params.verifier_gate.workers
        result = validate(lambda c, r: math_verifier.score_batch(c, r, workers=workers), cases)
    else:
        errors = []
        fn = verifiers.get(name)
        result = validate(lambda c, r: [fn(x, y) for x, y in zip(c, r)], format_cases(refs, sols))
    result.errors = [f"row {rows[i]['id']}: {message}" for i, message in errors]
    return {**result.to_dict(), "reference_errors": result.errors[:20], "confusions": result.confusions}


def validate_code_verifier(params: Params) -> dict:
    sb = params.sandbox
    limits = Limits(**sb.model_dump(exclude={"allow_unsandboxed"}))
    rows = []
    try:
        for completion, tests, expected, kind in CODE_CASES:
            got = score_code(completion, tests, limits, allow_unsandboxed=sb.allow_unsandboxed)
            rows.append({"kind": kind, "expected": expected, "score": got, "ok": abs(got - expected) < 1e-9})
    except SandboxUnavailable as exc:
        return {"precision": 0.0, "recall": 0.0, "accuracy": 0.0, "reference_errors": [str(exc)], "confusions": []}
    ok = sum(r["ok"] for r in rows) / len(rows)
    return {"precision": ok, "recall": ok, "accuracy": ok, "cases": len(rows), "reference_errors": [],
            "confusions": [r for r in rows if not r["ok"]]}


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
    out = Path(args.out)
    with tracking.stage_run("validate_verifiers", params, args.params):
        sets = reference_sets(Path(args.data), params.verifier_gate.max_examples, params.experiment.seed)
        results: dict[str, dict] = {}
        for reward in params.rewards:
            if reward.name == "code":
                results["code.self_test"] = validate_code_verifier(params)
                continue
            for set_name, rows in sets.items():
                results[f"{reward.name}.{set_name}"] = validate_text_verifier(reward.name, rows, params)
        failures = gate(results, params)
        text = report(results, failures)
        write_jsonl(out / "confusions.jsonl", ({"verifier": k, **c} for k, r in results.items() for c in r["confusions"]))
        with atomic_write(out / "report.md") as fh:
            fh.write(text)
        summary = {k: {m: v for m, v in r.items() if m not in ("confusions", "reference_errors")} for k, r in results.items()}
        metrics = {"verifiers": summary, "passed": not failures, "failures": failures}
        write_json(args.metrics, metrics)
        mlflow.set_tag("gate", "passed" if not failures else "failed")
        mlflow.log_metrics(tracking.numeric_metrics(metrics))
        mlflow.log_artifact(str(out / "report.md"))
        mlflow.log_artifact(args.metrics)
    print(text)
    if failures:
        print("validate_verifiers: the verifier gate failed (see above)", file=sys.stderr)
        raise SystemExit(EXIT_VERDICT)


if __name__ == "__main__":
    parser = stage_parser("validate_verifiers", __doc__)
    run_stage_cli(parser, main)
