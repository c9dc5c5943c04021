"""The stage DAG as dvc.yaml (generated from tasks/stages.py) defines it, so that the flow never restates it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tasks.stages import params_file_var


@dataclass(frozen=True)
class Stage:
    name: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]
    metrics: tuple[str, ...]


def _paths(entries) -> tuple[str, ...]:
    """dvc.yaml lists a path either as a string or as a one-key mapping of path -> options."""
    out = []
    for entry in entries or []:
        out.extend([entry] if isinstance(entry, str) else list(entry))
    return tuple(out)


def load_stages(dvc_yaml: str | Path = "dvc.yaml") -> list[Stage]:
    spec = yaml.safe_load(Path(dvc_yaml).read_text())
    return [
        Stage(name, _paths(s.get("deps")), _paths(s.get("outs")) + _paths(s.get("plots")), _paths(s.get("metrics")))
        for name, s in (spec.get("stages") or {}).items()
    ]


def _produces(stage: Stage, path: str) -> bool:
    return any(path == out or path.startswith(out.rstrip("/") + "/") for out in stage.outs + stage.metrics)


def stage_order(dvc_yaml: str | Path = "dvc.yaml", only: list[str] | None = None) -> list[Stage]:
    """Stages in dependency order (file order among independent ones), optionally a subset."""
    stages = load_stages(dvc_yaml)
    names = {s.name for s in stages}
    unknown = sorted(set(only or []) - names)
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; dvc.yaml defines {sorted(names)}")
    upstream = {
        s.name: {o.name for o in stages if o is not s and any(_produces(o, d) for d in s.deps)} for s in stages
    }
    ordered: list[Stage] = []
    done: set[str] = set()
    while len(ordered) < len(stages):
        ready = [s for s in stages if s.name not in done and upstream[s.name] <= done]
        if not ready:
            raise ValueError(f"dvc.yaml has a dependency cycle among {sorted(names - done)}")
        ordered.append(ready[0])
        done.add(ready[0].name)
    return [s for s in ordered if only is None or s.name in only]


def pipeline_params_file(dvc_yaml: str | Path = "dvc.yaml") -> str | None:
    """The ``params_file`` var that dvc.yaml's stages read their parameters from."""
    return params_file_var(dvc_yaml)
