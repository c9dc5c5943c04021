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


def test_a_runs_own_temporary_rewrites_do_not_make_the_checkout_dirty(tmp_path, monkeypatch):
    # Every run of a non-default set rewrote dvc.yaml for its length, so every run was tagged git_dirty.
    import json
    import subprocess

    from flows.workspace import edits
    from grpoflow.provenance import RUN_EDITS_JOURNAL, git_commit

    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "a.yaml").write_text("rl: {steps: 5}\n")
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    assert git_commit()[1] is False
    with edits({"dvc.yaml": "stages: {prepare: {}}\n", "params/a.yaml": "rl: {steps: 3}\n"}, log=lambda _: None):
        assert json.loads(RUN_EDITS_JOURNAL.read_text())["files"]  # the run's own journal
        assert git_commit()[1] is False
    (tmp_path / "dvc.yaml").write_text("stages: {mine: {}}\n")  # the user's edit, before a run
    assert git_commit()[1] is True
    with edits({"dvc.yaml": "stages: {prepare: {}}\n"}, log=lambda _: None):
        assert git_commit()[1] is True  # what the run rewrote was not the commit's text
