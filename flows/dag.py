"""The order the flow runs the declared stages in (tasks/stages.py): one stage model for dvc.yaml
and the flow. dvc.yaml is generated from the same declarations, so DVC's DAG and this order agree
(tests/unit/test_flows_dag.py checks it against the project's dvc.yaml)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.stages import Stage, params_file_var, stages_for

if TYPE_CHECKING:
    from grpoflow.config import Params


def _produces(stage: Stage, path: str) -> bool:
    """Whether ``stage`` writes ``path`` (or a directory holding it); ``outs`` includes its metrics."""
    return any(path == out or path.startswith(out.rstrip("/") + "/") for out in stage.outs)


def stage_order(stages: Sequence[Stage], only: list[str] | None = None) -> list[Stage]:
    """``stages`` in dependency order (declaration order among independent ones), optionally the
    subset ``only``: a stage that reads what another writes runs after it."""
    names = {s.name for s in stages}
    unknown = sorted(set(only or []) - names)
    if unknown:
        raise ValueError(f"unknown stage(s) {unknown}; the set runs {sorted(names)}")
    upstream = {
        s.name: {o.name for o in stages if o is not s and any(_produces(o, d) for d in s.paths("dep"))} for s in stages
    }
    ordered: list[Stage] = []
    done: set[str] = set()
    while len(ordered) < len(stages):
        ready = [s for s in stages if s.name not in done and upstream[s.name] <= done]
        if not ready:
            raise ValueError(f"the stages have a dependency cycle among {sorted(names - done)}")
        ordered.append(ready[0])
        done.add(ready[0].name)
    return [s for s in ordered if only is None or s.name in only]


def run_order(params: Params, only: list[str] | None = None) -> list[Stage]:
    """The stages a run of the validated set ``params`` runs (``only`` those, or all), in order: the
    stages dvc.yaml holds once the flow has wired it for the set (flows.pipeline.run_edits)."""
    return stage_order(stages_for(params), only=only)


def pipeline_params_file(dvc_yaml: str | Path = "dvc.yaml") -> str | None:
    """The ``params_file`` var that dvc.yaml's stages read their parameters from."""
    return params_file_var(dvc_yaml)
