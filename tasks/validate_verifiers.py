"""Stage ``validate_verifiers``: the gate between the data and any training on its rewards.

    python -m tasks.validate_verifiers --params params/default.yaml --data data/prepared \
        --out data/verifier_validation --metrics metrics/validate_verifiers.json

For every verifier in ``rewards``, on the rows of its tasks in the val split and each benchmark:
scores gold answers in several surface forms (a code row's reference program), perturbed wrong
answers (mutated programs) and malformed or hostile completions; writes precision, recall, accuracy,
throughput and the confusion cases. A reward model in ``rewards`` (name: rm) is gated too: its
held-out pairwise accuracy (the reward_model stage's) and the share of val rows whose gold solution
it scores above a perturbed wrong one. Exits 3 below the thresholds in ``verifier_gate``, or when
any reference cannot be used.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import verifiers
from grpoflow.config import RM_DEFAULT_PATH, RM_REWARD, Params
from grpoflow.io import atomic_write, read_jsonl, write_json, write_jsonl
from tasks.cli import print_verdict, run_stage_cli, stage_parser
from tasks.stages import stage
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
        result = validate(verifier.score, verifier.gate_cases(rows), accepts=verifier.accepts)
    except SandboxUnavailable as exc:
        return {"precision": 0.0, "recall": 0.0, "accuracy": 0.0, "reference_errors": [str(exc)], "confusions": []}
    return {**result.to_dict(), "reference_errors": errors[:20], "confusions": result.confusions}


def perturbed_solution(row: dict) -> str | None:
    """A wrong version of the row's gold solution: another final answer (math), a mutated program
    (code); None when the row has no solution to perturb."""
    from grpoflow.data.records import row_task
    from verifiers.code import mutants
    from verifiers.math_cases import wrong_answers

    solution = (row.get("solution") or "").strip()
    if not solution:
        return None
    if row_task(row) == "code":
        return next((program for _, program in mutants(solution)), None)
    wrong = next(iter(wrong_answers(str(row["reference_answer"])).values()), None)
    head, marker, _ = solution.rpartition("####")
    return f"{head}{marker} {wrong}" if marker and wrong is not None else None


def reward_model_gate(params: Params, rows: list[dict], rm_metrics: Path) -> dict:
    """The reward model's gate values on ``rows``: the share whose gold solution it scores above a
    perturbed wrong one, and (from the reward_model stage) its held-out pairwise accuracy. A path
    that is no reward model is a failure with the loader's reason."""
    from grpoflow.rl.rewards import reward_model_scorer

    reward = next(r for r in params.rewards if r.name == RM_REWARD)
    result: dict = {"path": reward.model_path}
    if reward.model_path == RM_DEFAULT_PATH and rm_metrics.is_file():
        result["heldout_accuracy"] = json.loads(rm_metrics.read_text())["heldout_accuracy"]
    cases = [(r, wrong) for r in rows if (wrong := perturbed_solution(r)) is not None]
    if not cases:
        return {**result, "error": "no val row has a gold solution to perturb"}
    scorer = reward_model_scorer(params, reward)
    try:
        gold_scores = scorer([r["solution"] for r, _ in cases], [r for r, _ in cases])
        wrong_scores = scorer([w for _, w in cases], [r for r, _ in cases])
    except (ValueError, FileNotFoundError) as exc:
        return {**result, "error": str(exc)}
    wins = sum(g > w for g, w in zip(gold_scores, wrong_scores))
    return {**result, "win_rate": wins / len(cases), "cases": len(cases)}


def rm_failures(rm: dict, params: Params) -> list[str]:
    """Why the reward model fails the gate (empty when it passes)."""
    g = params.verifier_gate
    if "error" in rm:
        return [f"rm: {rm['error']}"]
    failures = []
    if rm["win_rate"] < g.min_rm_win_rate:
        failures.append(
            f"rm: gold solutions beat a perturbed wrong one in {rm['win_rate']:.4f} of {rm['cases']} "
            f"val rows < verifier_gate.min_rm_win_rate {g.min_rm_win_rate}"
        )
    if rm.get("heldout_accuracy", 1.0) < g.min_rm_accuracy:
        failures.append(
            f"rm: held-out pairwise accuracy {rm['heldout_accuracy']:.4f} < verifier_gate.min_rm_accuracy "
            f"{g.min_rm_accuracy}"
        )
    return failures


def gate(results: dict[str, dict], params: Params) -> list[str]:
    g = params.verifier_gate
    failures = []
    for key, r in results.items():
        if r["reference_errors"]:
            failures.append(
                f"{key}: {len(r['reference_errors'])} reference answers cannot be parsed, "
                f"e.g. {r['reference_errors'][0]}"
            )
        if r["precision"] < g.min_precision:
            failures.append(f"{key}: precision {r['precision']:.4f} < verifier_gate.min_precision {g.min_precision}")
        if r["recall"] < g.min_recall:
            failures.append(f"{key}: recall {r['recall']:.4f} < verifier_gate.min_recall {g.min_recall}")
        if r.get("mutant_kill_rate", 1.0) < g.min_mutants_killed:
            failures.append(
                f"{key}: the tests fail {r['mutant_kill_rate']:.4f} of {r['mutants']} mutated reference "
                f"programs < verifier_gate.min_mutants_killed {g.min_mutants_killed}"
            )
    return failures


def report(results: dict[str, dict], failures: list[str], rm: dict | None = None, timings: bool = True) -> str:
    """The gate's report in Markdown. ``timings=False`` leaves out the checks per second: the copy in the
    stage's output directory, on which every training stage depends, must change only with the verdict."""
    lines = [f"# Verifier validation: {'FAILED' if failures else 'PASSED'}", ""] + [f"- {f}" for f in failures]
    speed = (" checks/s |", "---|") if timings else ("", "")
    lines += [
        "",
        f"| verifier.set | cases | precision | recall | accuracy | mutants killed |{speed[0]}",
        f"|---|---|---|---|---|---|{speed[1]}",
    ]
    for key, r in results.items():
        killed = f"{r['mutant_kill_rate']:.4f} of {r['mutants']}" if "mutants" in r else ""
        lines.append(
            f"| {key} | {r.get('cases', '')} | {r['precision']:.4f} | {r['recall']:.4f} | {r['accuracy']:.4f} "
            f"| {killed} |" + (f" {r.get('checks_per_second', '')} |" if timings else "")
        )
    if rm is not None:
        lines += ["", "## Reward model", "", *(f"- {k}: {v}" for k, v in rm.items())]
    for key, r in results.items():
        if r["confusions"]:
            lines += [
                "",
                f"## Confusions: {key}",
                "",
                "```",
                *[json.dumps(c)[:400] for c in r["confusions"][:10]],
                "```",
            ]
    return "\n".join(lines) + "\n"


def kinds_table(summary: dict[str, dict]) -> dict[str, list]:
    """Every verifier's cases by kind as one table's columns (verifier, kind, accepted, rejected):
    one MLflow artifact instead of a chart per count."""
    rows = [
        {"verifier": name, "kind": kind, **counts}
        for name, result in summary.items()
        for kind, counts in result.get("by_kind", {}).items()
    ]
    return {col: [r.get(col) for r in rows] for col in ("verifier", "kind", "accepted", "rejected")}


def _without_kinds(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "by_kind"}


def main(args: argparse.Namespace, params: Params) -> None:
    import mlflow  # here, not above: --help answers without loading MLflow (or torch)

    from grpoflow.data.records import row_task
    from tasks import notes, tracking

    start = time.perf_counter()
    out = Path(args.out)
    with tracking.stage_run("validate_verifiers", params, args.params):
        sets = reference_sets(Path(args.data), params.verifier_gate.max_examples, params.experiment.seed)
        results: dict[str, dict] = {}
        for reward in (r for r in params.rewards if r.name != RM_REWARD):
            verifier = verifiers.create(
                reward.name, reward.options, sandbox=params.sandbox, workers=params.verifier_gate.workers
            )
            for set_name, rows in sets.items():
                mine = [r for r in rows if row_task(r) in verifier.tasks]
                if mine:
                    results[f"{reward.name}.{set_name}"] = validate_verifier(verifier, mine)
        failures = gate(results, params)
        rm = None
        if any(r.name == RM_REWARD for r in params.rewards):
            rm = reward_model_gate(params, sets["val"], Path(args.rm_metrics))
            failures += rm_failures(rm, params)
        text = report(results, failures, rm)
        write_jsonl(
            out / "confusions.jsonl", ({"verifier": k, **c} for k, r in results.items() for c in r["confusions"])
        )
        with atomic_write(out / "report.md") as fh:  # without timings: a training stage's dependency
            fh.write(report(results, failures, rm, timings=False))
        summary = {
            k: {m: v for m, v in r.items() if m not in ("confusions", "reference_errors")} for k, r in results.items()
        }
        metrics = {
            "verifiers": summary,
            **({"reward_model": rm} if rm else {}),
            "passed": not failures,
            "failures": failures,
            "seconds": round(time.perf_counter() - start, 1),
        }
        write_json(args.metrics, metrics)
        mlflow.set_tag("gate", "passed" if not failures else "failed")
        mlflow.set_tag(tracking.NOTE, notes.verifiers_note(metrics))
        tracking.log_summary({**metrics, "verifiers": {k: _without_kinds(r) for k, r in summary.items()}})
        mlflow.log_table(kinds_table(summary), artifact_file="cases_by_kind.json")
        mlflow.log_text(text, "report.md")  # with the checks per second
        mlflow.log_artifact(args.metrics)
    print_verdict("validate_verifiers", text, out / "report.md", not failures)


if __name__ == "__main__":
    parser = stage_parser("validate_verifiers", __doc__)
    rm_metrics = stage("reward_model").file("metrics")
    parser.add_argument(
        "--rm-metrics",
        default=rm_metrics,
        help=f"the reward_model stage's metrics: its held-out pairwise accuracy (default: {rm_metrics})",
    )
    run_stage_cli(parser, main)
