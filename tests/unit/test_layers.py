"""The layers of docs/architecture.md, read from every import statement (lazy ones in functions too):
imports point downwards, the core's packages do not reach into the loop, and light modules stay light."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def imports(folder: str) -> list[tuple[str, str]]:
    """``(file, imported module)`` for every absolute import under ``folder``."""
    found = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(str(path.relative_to(REPO)), a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((str(path.relative_to(REPO)), node.module))
    return found


def reaching(folder: str, *targets: str) -> list[str]:
    """The imports under ``folder`` of any of ``targets`` (a module or a package and its modules)."""
    return [f"{f}: {m}" for f, m in imports(folder) if any(m == t or m.startswith(t + ".") for t in targets)]


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("grpoflow/models", ("grpoflow.rl", "grpoflow.evaluation", "grpoflow.trainers")),  # models own no loop
        ("grpoflow/evaluation", ("grpoflow.rl",)),  # the loop evaluates with it; never the other way
        ("grpoflow/data", ("grpoflow.rl", "grpoflow.evaluation", "grpoflow.trainers")),
        ("grpoflow/rollout", ("grpoflow.rl", "grpoflow.evaluation", "grpoflow.trainers")),
        ("grpoflow/trainers", ("grpoflow.rl",)),
        ("grpoflow/config", ("grpoflow.rl", "grpoflow.models", "grpoflow.data", "torch")),  # the schema stays light
        ("grpoflow", ("tasks", "flows", "prefect", "mlflow", "dvc")),  # the core knows no orchestration
        ("tasks", ("flows",)),
        ("verifiers", ("grpoflow", "tasks", "flows")),
    ],
)
def test_imports_point_downwards(folder, forbidden):
    assert reaching(folder, *forbidden) == []


@pytest.mark.parametrize("module", ["grpoflow/catalog.py", "grpoflow/registry.py"])
def test_the_name_tables_import_nothing_of_the_project(module):
    path = REPO / module
    found = [m for f, m in imports("grpoflow") if f == module and m.split(".")[0] in ("grpoflow", "torch", "verifiers")]
    assert path.is_file() and found == []
