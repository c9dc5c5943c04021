"""Tests reach grpoflow/rl/ and the algorithms' folders through their public names only (#52): a private
name a test imports or reads is a contract nobody wrote down, and a refactor behind the public one
breaks the test."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
PACKAGES = ("grpoflow.rl", "grpoflow.algorithms")


def _rl_module(name: str | None) -> bool:
    return name is not None and any(name == p or name.startswith(p + ".") for p in PACKAGES)


def private_uses(source: str) -> list[str]:
    """``from grpoflow.rl... import _x`` and ``m._x`` where ``m`` names a module of those packages."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to grpoflow.rl modules
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _rl_module(node.module):
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                elif node.module in PACKAGES or node.module.startswith("grpoflow.algorithms."):  # a module, by name
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if _rl_module(a.name) and a.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_test_reaches_a_private_name_of_the_loop_or_an_algorithm():
    uses = {
        str(p.relative_to(TESTS)): private_uses(p.read_text())
        for p in sorted(TESTS.rglob("*.py"))
        if p.name != Path(__file__).name
    }
    assert {k: v for k, v in uses.items() if v} == {}


def test_the_scan_sees_both_kinds_of_private_use():
    source = (
        "from grpoflow.rl.ppo import _hidden, shown\n"
        "from grpoflow.rl import logprobs as lp\n"
        "import grpoflow.rl.kernels as k\n"
        "lp._rows(1); k._probe; lp.public; other._x\n"
    )
    assert sorted(private_uses(source)) == [
        "line 1: from grpoflow.rl.ppo import _hidden",
        "line 4: k._probe",
        "line 4: lp._rows",
    ]
