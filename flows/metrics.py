"""The workspace's headline metrics, readable in a terminal (``make metrics``):

    python -m flows.metrics            # a table under 80 columns
    python -m flows.metrics --json     # the same numbers, for a script

``dvc metrics show`` prints every key of every stage's metrics JSON on one line per file (thousands
of characters wide). This reads the same files (``metrics/<stage>.json``, as dvc.yaml declares
them) and shows the few numbers a run is judged by: test pass@1 per model and each model's gain
over the SFT reference, seconds per step and peak memory of each training stage, the winner, the
gates' verdicts, and each stage's time.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flows.lineage import locked_stages
from tasks.stages import RUN_RECORD, STAGES

REFERENCE = "sft"
GATES = ("prepare", "validate_verifiers")
# The run record's digest of each dvc.lock entry of the stages its run went through (flows/experiments.py
# writes it): a later `dvc repro`, a run that saved no experiment, or an ablation (whose record names
# the shared stages and its arms) leaves a record that did not make the outputs in place.
RUN_RECORD_LOCK = "dvc_lock_entries"


def read_workspace(root: Path = Path(".")) -> dict[str, dict]:
    """Each stage's metrics JSON found under ``root``, by stage name; the run record as ``run`` while
    it describes the outputs in place, else as ``earlier_run``."""
    found = {}
    for s in STAGES:
        for path in s.metrics:
            if (root / path).is_file():
                found[s.name] = json.loads((root / path).read_text())
    if (root / RUN_RECORD).is_file():
        record = json.loads((root / RUN_RECORD).read_text())
        found["run" if _describes_workspace(record, root) else "earlier_run"] = record
    return found


def lock_entries(stages: Iterable[str] | None = None, root: Path = Path(".")) -> dict[str, str]:
    """A digest of each stage's dvc.lock entry under ``root`` (its command, deps, params and outputs: what
    its outputs are and were made from), for ``stages`` (default: every stage the lock holds)."""
    return {
        name: hashlib.sha256(json.dumps(entry, sort_keys=True, default=str).encode()).hexdigest()
        for name, entry in locked_stages(root / "dvc.lock").items()
        if stages is None or name in stages
    }


def _describes_workspace(record: dict, root: Path) -> bool:
    """Whether the recorded run made every pipeline output in place: each pipeline stage dvc.lock holds
    has the entry it had when the run was recorded (a record from before the digests were kept is
    taken at its word)."""
    recorded = record.get(RUN_RECORD_LOCK)
    if recorded is None:
        return True
    now = lock_entries({s.name for s in STAGES}, root)
    return bool(now) and all(recorded.get(name) == digest for name, digest in now.items())


def summarize(found: dict[str, dict]) -> dict[str, Any]:
    """The headline numbers of ``found`` (:func:`read_workspace`'s shape)."""
    from flows.run_report import headline, trainings  # imports MLflow: not for --help

    by_path = {path: found[s.name] for s in STAGES if s.name in found for path in s.metrics}
    trains = trainings(by_path.get)
    head = headline(found.get("evaluate"), found.get("compare"), trains)
    scores = head["test_pass@1"]
    reference = scores.get(REFERENCE)
    models = [
        {
            "model": name,
            "test_pass@1": value,
            "gain": None if name == REFERENCE or None in (value, reference) else value - reference,
            "seconds_per_step": trains.get(name, {}).get("seconds_per_step"),
            "steps": trains.get(name, {}).get("steps"),
            "peak_memory_mb": trains.get(name, {}).get("peak_memory_mb"),
        }
        for name, value in scores.items()
    ]
    # Each stage's wall time as the flow measured it (the run page's and MLflow's), else the command's own.
    own = {n: m["seconds"] for n, m in found.items() if isinstance(m.get("seconds"), (int, float))}
    seconds = found.get("run", {}).get("stage_seconds") or own
    return {
        "run": {k: found.get("run", {}).get(k) for k in ("params_file", "overrides", "dvc_experiment")},
        "earlier_run": found.get("earlier_run", {}).get("dvc_experiment"),
        "models": models,
        "winner": head["winner"],
        "gates": {g: found[g].get("passed") for g in GATES if g in found},
        "rows": (found.get("prepare") or {}).get("rows"),
        "reward_model_accuracy": (found.get("reward_model") or {}).get("heldout_accuracy"),
        "stage_seconds": seconds,
        # Stages whose time is not known (their metrics keep none, and no run record stands): not in the sum.
        "untimed": [s.name for s in STAGES if s.name in found and s.name not in seconds],
    }


# The widest line `make metrics` prints: it reads in a narrow terminal or beside the run page.
WIDTH = 79


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "pts":
        return f"{value * 100:+.1f} pts"
    return f"{value:.2f}" if kind == "sec" else f"{value:.0f}"


def _models_table(models: list[dict]) -> list[str]:
    header = ["model", "test pass@1", f"vs {REFERENCE}", "s/step", "steps", "peak MiB"]
    kinds = ["pct", "pts", "sec", "int", "int"]
    keys = ["test_pass@1", "gain", "seconds_per_step", "steps", "peak_memory_mb"]
    table = [header] + [[m["model"]] + [_cell(m[k], kind) for k, kind in zip(keys, kinds)] for m in models]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return [
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
        for row in table
    ]


def format_summary(summary: dict[str, Any]) -> str:
    """:func:`summarize`'s numbers as a few short lines."""
    run = summary["run"]
    lines = []
    if run.get("params_file"):
        overrides = " ".join(f"{k}={v}" for k, v in (run.get("overrides") or {}).items())
        lines.append(f"{run['params_file']}" + (f", overrides: {overrides}" if overrides else ""))
    if summary["earlier_run"]:
        lines += [
            f"{RUN_RECORD} is experiment {summary['earlier_run']}'s, which did not make all",
            "the outputs in place: its params, overrides and stage times are not shown",
        ]
    if summary["models"]:
        lines += _models_table(summary["models"])
    else:
        lines.append("not evaluated yet (no metrics/evaluate.json)")
    if summary["winner"]:
        lines.append(f"winner on test pass@1: {summary['winner']}")
    if summary["reward_model_accuracy"] is not None:
        lines.append(f"reward model: {summary['reward_model_accuracy']:.1%} held-out pairwise accuracy")
    gates = [f"{g} {'passed' if ok else 'FAILED'}" for g, ok in summary["gates"].items()]
    rows = summary["rows"] or {}
    if "kept" in rows:
        gates[0] += f" ({rows['kept']} rows kept, {rows.get('quarantined', 0)} quarantined)"
    if gates:
        lines.append("gates: " + ", ".join(gates))
    seconds = summary["stage_seconds"]
    if seconds:
        lines += _wrapped(f"stage time: {sum(seconds.values()):.0f} s (", _seconds(seconds))
    if summary["untimed"]:
        lines.append(f"no time kept for {', '.join(summary['untimed'])}")
    return "\n".join(lines)


def _wrapped(start: str, parts: list[str]) -> list[str]:
    """``start`` then ``parts`` as a comma list in brackets, broken only between two parts (a stage's
    name stays beside its time), each further line indented, none wider than :data:`WIDTH`."""
    pieces = [p + "," for p in parts[:-1]] + [parts[-1] + ")"]
    lines = [start + pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + 1 + len(piece) > WIDTH:
            lines.append("  " + piece)
        else:
            lines[-1] += " " + piece
    return lines


def _seconds(seconds: dict[str, float]) -> list[str]:
    return [f"{name} {s:.0f}" if s >= 10 else f"{name} {s:.1f}" for name, s in seconds.items()]


def main(argv: list[str] | None = None) -> int:
    """Print the workspace's headline metrics (or that there are none yet)."""
    from tasks.cli import command_parser

    parser = command_parser("flows.metrics", __doc__)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    found = read_workspace()
    if not found:
        from flows.rehearse import KEPT_DIR  # a smoke run keeps its metrics there, never in the workspace

        print(
            "no metrics yet: a run of the pipeline writes them (make demo, or dvc repro); a smoke run keeps "
            f"its own in {KEPT_DIR}/<set>/metrics/"
        )
        return 0
    summary = summarize(found)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
