"""The size budget docs/architecture.md states ("The size budget"), read from there so that the
docs and the test cannot disagree: no module over its line budget and no function over its own in
the code that runs (grpoflow/, verifiers/, tasks/, flows/, benchmarks/), so that each file keeps one
job and each function reads on one screen.

The one exception is verifiers/sandbox_runtime.py: it runs inside the sandbox as a standalone
script, copied there alone, so it may be long but must import nothing outside the standard library.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("grpoflow", "verifiers", "tasks", "flows", "benchmarks")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BUDGET = re.compile(r"No module over \*\*(\d+) lines\*\* and no function over \*\*(\d+) lines\*\*")


def _stated_budget() -> tuple[int, int]:
    """``(module lines, function lines)`` as docs/architecture.md states them: the one place they are written."""
    found = BUDGET.search(" ".join(ARCHITECTURE.read_text(encoding="utf-8").split()))  # however the lines wrap
    if found is None:
        raise LookupError(f"{ARCHITECTURE} states no size budget: its sentence must match {BUDGET.pattern}")
    return int(found[1]), int(found[2])


MAX_MODULE_LINES, MAX_FUNCTION_LINES = _stated_budget()
SANDBOX_RUNTIME = ROOT / "verifiers" / "sandbox_runtime.py"
LONG_MODULES_ALLOWED = {SANDBOX_RUNTIME}


def _modules() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _functions(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Every function and method of the module (``<file>:<line> <name>``), with its length: from
    its ``def`` line (decorators excluded) to its last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (f"{path.relative_to(root)}:{node.lineno} {node.name}", (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_the_budget_and_its_exception_are_the_ones_the_docs_state():
    assert 0 < MAX_FUNCTION_LINES < MAX_MODULE_LINES  # both read, each where it belongs
    assert SANDBOX_RUNTIME.relative_to(ROOT).as_posix() in ARCHITECTURE.read_text(encoding="utf-8")


def test_the_budget_sees_the_code():
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"grpoflow/rl/trainer.py", "verifiers/sandbox_runtime.py", "tasks/stages.py", "flows/pipeline.py"} <= names


def test_no_module_is_over_the_line_budget():
    sizes = {p: _lines(p) for p in _modules() if p not in LONG_MODULES_ALLOWED}
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p, n in sizes.items() if n > MAX_MODULE_LINES]
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(over)


def test_no_function_is_over_the_line_budget():
    over = [f"{name}: {n} lines" for p in _modules() for name, n in _functions(p) if n > MAX_FUNCTION_LINES]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(over)


def test_a_function_is_measured_from_its_def_line_to_its_last(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "@decorator\n@another\ndef f():\n    x = 1\n\n    return x\n\n\nclass C:\n    def g(self):\n        pass\n"
    )
    assert _functions(path, tmp_path) == [("m.py:3 f", 4), ("m.py:10 g", 2)]


def test_the_sandbox_runtime_imports_only_the_standard_library():
    tree = ast.parse(SANDBOX_RUNTIME.read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    relative = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]
    assert imported, "the sandbox runtime imports nothing: is this the right file?"
    assert not relative, f"the sandbox runtime must stand alone, it imports relatively: {relative}"
    assert imported <= sys.stdlib_module_names, (
        f"the sandbox runtime must stay stdlib-only, it imports: {sorted(imported - sys.stdlib_module_names)}"
    )
