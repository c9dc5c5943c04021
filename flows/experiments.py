"""Every successful flow run as a DVC experiment: ``dvc exp show`` lists scheduled runs next to
hand-run ones, ``dvc exp apply <name>`` + ``dvc repro`` reproduces any of them, and
``metrics/run.json`` inside the experiment names the MLflow run (the MLflow run carries the
experiment's name and commit in return)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from grpoflow.io import write_json

RUN_RECORD = "metrics/run.json"


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


def record(name: str, run_info: dict) -> str:
    """Write ``metrics/run.json`` and save the workspace as DVC experiment ``name``; its commit."""
    write_json(RUN_RECORD, {"dvc_experiment": name, **run_info})
    include = [arg for path in untracked_outputs() for arg in ("--include-untracked", path)]
    out = _dvc("exp", "save", "--force", "--name", name, *include)
    if out.returncode != 0:
        raise RecordFailed(f"dvc exp save failed (exit {out.returncode}); the run's outputs are intact in the workspace. "
                           f"Set orchestration.record_experiment: false to skip recording.\n{out.stdout}{out.stderr}")
    refs = subprocess.run(["git", "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    return next((line.split()[0] for line in refs if line.endswith(f"/{name}")), "unknown")


def push(remote: str) -> str:
    """``dvc push`` the cached outputs (data, models) to ``remote``; DVC's summary line."""
    out = _dvc("push", "--remote", remote)
    if out.returncode != 0:
        raise RecordFailed(f"dvc push --remote {remote} failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")
    return (out.stdout.strip().splitlines() or [""])[-1]
