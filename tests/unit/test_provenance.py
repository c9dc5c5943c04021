"""The import graph that stage deps and checkpoint fingerprints are built from."""

from __future__ import annotations

from pathlib import Path

from grpoflow.provenance import module_files


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_closure_follows_absolute_relative_lazy_and_submodule_imports(tmp_path):
    _write(
        tmp_path,
        {
            "tasks/__init__.py": "",
            "tasks/stage.py": "from grpoflow import core\nimport json\n",
            "grpoflow/__init__.py": "",
            "grpoflow/core.py": "from .util import helper\n\ndef f():\n    from grpoflow.lazy import x  # lazy\n",
            "grpoflow/util.py": "from verifiers import math\n",
            "grpoflow/lazy.py": "x = 1\n",
            "grpoflow/unused.py": "",
            "verifiers/__init__.py": "from verifiers.registry import names\n",
            "verifiers/registry.py": "",
            "verifiers/math.py": "",
        },
    )
    assert module_files("tasks.stage", root=tmp_path) == [
        "grpoflow/__init__.py",
        "grpoflow/core.py",
        "grpoflow/lazy.py",
        "grpoflow/util.py",
        "tasks/__init__.py",
        "tasks/stage.py",
        "verifiers/__init__.py",
        "verifiers/math.py",
        "verifiers/registry.py",
    ]


def test_third_party_and_missing_modules_are_not_followed(tmp_path):
    _write(tmp_path, {"tasks/__init__.py": "", "tasks/x.py": "import torch\nfrom grpoflow.gone import y\n"})
    assert module_files("tasks.x", root=tmp_path) == ["tasks/__init__.py", "tasks/x.py"]
