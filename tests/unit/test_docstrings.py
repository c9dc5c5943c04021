"""Every public class and function of the core (grpoflow/, verifiers/) says what it is in a docstring."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = sorted(
    p for pkg in ("grpoflow", "verifiers") for p in (REPO / pkg).rglob("*.py") if "__pycache__" not in p.parts
)


def _public_without_docstring(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    missing = []

    def visit(nodes, prefix: str) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name.startswith("_"):
                    continue
                if ast.get_docstring(node) is None:
                    missing.append(f"{prefix}{node.name}")
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return missing


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(REPO)))
def test_every_public_definition_has_a_docstring(path):
    assert _public_without_docstring(path) == []
