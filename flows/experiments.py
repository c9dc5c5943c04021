"""Every successful flow run as a DVC experiment: ``dvc exp show`` lists scheduled runs next to
hand-run ones, ``dvc exp apply <name>`` + ``dvc repro`` reproduces any of them, and
``metrics/run.json`` inside the experiment names the MLflow run (the MLflow run carries the
experiment's name and commit in return).

``python -m flows.experiments`` (``make experiments``) shows them as the few columns people
compare, where ``dvc exp show`` has hundreds (every dependency's hash):

    python -m flows.experiments            # newest first
    python -m flows.experiments --json     # the same rows, for a script

The workspace's own run, in more detail (gain over SFT, gates, stage times): ``make metrics``
(:mod:`flows.metrics`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from flows.metrics import RUN_RECORD_LOCK, lock_entries
from flows.run_report import headline, trainings
from grpoflow.io import write_json
from tasks.stages import RUN_RECORD
from tasks.stages import stage as declared


class RecordFailed(RuntimeError):
    pass


def experiment_name(flow_run_name: str, flow_run_id: str) -> str:
    """A git-ref-safe, unique name: the flow run's name plus the start of its id."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", flow_run_name or "run").strip("-") or "run"
    return f"{base}-{flow_run_id.replace('-', '')[:8]}"


def untracked_outputs(dvc_yaml: str | Path = "dvc.yaml") -> list[str]:
    """What an experiment commit must carry besides git-tracked files: dvc.lock (which points at
    the cached outputs) and every output DVC keeps out of its cache (metrics, plots, reports),
    except persistent ones (training checkpoints: too big for git, and only needed to resume)."""
    spec = yaml.safe_load(Path(dvc_yaml).read_text())
    paths = ["dvc.lock", RUN_RECORD]
    for stage in (spec.get("stages") or {}).values():
        for kind in ("outs", "metrics", "plots"):
            for entry in stage.get(kind) or []:
                if isinstance(entry, dict):
                    path, opts = next(iter(entry.items()))
                    if (opts or {}).get("cache", True) is False and not (opts or {}).get("persist", False):
                        paths.append(path)
    return [p for p in paths if Path(p).exists()]


def _dvc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], capture_output=True, text=True)


def record(name: str, run_info: dict, stages: list[str]) -> str:
    """Write ``metrics/run.json`` (with the dvc.lock entries of ``stages``, those the run went through) and
    save the workspace as DVC experiment ``name``; its commit. Refused (:class:`~flows.lineage.InputsChanged`,
    one line) when an input changed after a stage read it: the save would rewrite dvc.lock's entry."""
    from flows import lineage

    lineage.check_before_save(list(yaml.safe_load(Path("dvc.yaml").read_text()).get("stages") or {}))
    write_json(RUN_RECORD, {"dvc_experiment": name, RUN_RECORD_LOCK: lock_entries(stages), **run_info})
    include = [arg for path in untracked_outputs() for arg in ("--include-untracked", path)]
    out = _dvc("exp", "save", "--force", "--name", name, *include)
    if out.returncode != 0:
        raise RecordFailed(
            f"dvc exp save failed (exit {out.returncode}); the run's outputs are intact in the workspace. "
            f"Set orchestration.record_experiment: false to skip recording.\n{out.stdout}{out.stderr}"
        )
    refs = subprocess.run(
        ["git", "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return next((line.split()[0] for line in refs if line.endswith(f"/{name}")), "unknown")


def overrides_note(overrides: dict | None, ran: list[str]) -> str | None:
    """After a run with overrides (``--set``, or a deployment's ``overrides``), the line that says why
    ``dvc status`` now shows the stages of ``ran`` that read a set key as changed (restored from DVC's
    run cache or not, their lock entries hold the overrides), and how to make it clean; None after a run
    without overrides."""
    from tasks.tracking import stage_keys

    readers = [name for name in ran if any(_reads(stage_keys(name) or (), key) for key in overrides or {})]
    if not overrides or not readers:
        return None
    shown = " ".join(f"{k}={v}" for k, v in overrides.items())
    return (
        f"dvc status now shows {', '.join(readers)} as changed: their outputs were made with the overrides {shown}, "
        "which the params file does not hold. `dvc exp apply <the experiment above>` puts the run's params in place "
        "(dvc status is then clean); a run without overrides remakes the outputs from the set's own."
    )


def _reads(params: tuple[str, ...], key: str) -> bool:
    """Whether a stage that declares ``params`` (sections or dotted keys) reads dotted ``key``."""
    return any(key == p or key.startswith(p + ".") or p.startswith(key + ".") for p in params)


def push(remote: str) -> str:
    """``dvc push`` the cached outputs (data, models) to ``remote``; DVC's summary line."""
    out = _dvc("push", "--remote", remote)
    if out.returncode != 0:
        raise RecordFailed(f"dvc push --remote {remote} failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")
    return (out.stdout.strip().splitlines() or [""])[-1]


def _metrics(rev: dict) -> dict[str, dict]:
    return {path: (v or {}).get("data") or {} for path, v in ((rev.get("data") or {}).get("metrics") or {}).items()}


def _stage_metrics(files: dict[str, dict], name: str) -> dict | None:
    """The metrics one revision recorded for the stage ``name`` (None when it has none)."""
    return files.get(declared(name).file("metrics"))


def experiment_rows(shown: list) -> list[dict]:
    """``dvc exp show --json`` as one row per experiment, newest first: what it ran (params file,
    overrides) and its headline (:func:`flows.run_report.headline`: test pass@1 per model, seconds
    per step per algorithm, winner)."""
    rows = []
    for baseline in shown:
        for exp in baseline.get("experiments") or []:
            for rev in exp.get("revs") or []:
                files = _metrics(rev)
                head = headline(
                    _stage_metrics(files, "evaluate"), _stage_metrics(files, "compare"), trainings(files.get)
                )
                run = files.get(RUN_RECORD, {})
                rows.append(
                    {
                        "experiment": rev.get("name") or exp.get("name") or rev["rev"][:7],
                        "created": ((rev.get("data") or {}).get("timestamp") or "")[:16].replace("T", " "),
                        "params": run.get("params_file", ""),
                        "overrides": " ".join(f"{k}={v}" for k, v in (run.get("overrides") or {}).items()),
                        **{f"pass@1 {name}": v for name, v in head["test_pass@1"].items()},
                        **{f"s/step {name}": v for name, v in head["seconds_per_step"].items()},
                        "winner": head["winner"] or "",
                    }
                )
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def format_rows(rows: list[dict]) -> str:
    """``rows`` as an aligned text table (numbers to three decimals)."""
    if not rows:
        return "no DVC experiments yet: a successful flow run of every stage saves one"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cell = lambda v: "-" if v is None or v == "" else f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    table = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in table)


def main(argv: list[str] | None = None) -> int:
    from tasks.cli import command_parser

    parser = command_parser("flows.experiments", __doc__)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    out = _dvc("exp", "show", "--json")
    if out.returncode != 0:
        print(f"dvc exp show failed (exit {out.returncode}):\n{out.stderr}", file=sys.stderr)
        return 1
    rows = experiment_rows(json.loads(out.stdout))
    print(json.dumps(rows, indent=2) if args.json else format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
