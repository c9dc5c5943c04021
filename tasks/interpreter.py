"""The interpreter a stage runs under. dvc.yaml's commands say ``python``, which a shell finds on PATH:
``.venv/bin/dvc repro`` from a shell where the project's environment is not activated would run each
stage under whatever ``python`` is there (the system's), which fails at its first import, after DVC has
deleted the stage's outputs. So before a stage's code runs, ``tasks/__init__.py`` asks
:func:`ensure_project_env`: an interpreter that lacks the project's packages hands the same command to
the checkout's ``.venv`` (made by ``make setup``), or, where there is none, stops with one line that says
what to run. Standard library only: it runs under the wrong interpreter by design.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# What every stage imports and a bare Python lacks: their absence is the sign of the wrong interpreter.
NEEDED = ("torch", "deepspeed", "mlflow", "transformers", "pydantic", "yaml")
ROOT = Path(__file__).resolve().parents[1]


def missing(names: tuple[str, ...] = NEEDED) -> list[str]:
    """The packages of ``names`` this interpreter cannot import (found without importing any)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def ensure_project_env(root: Path = ROOT, argv: list[str] | None = None) -> None:
    """Return if this interpreter has the project's packages; else run ``argv`` (this process's command
    line) under ``root/.venv/bin/python`` in place of this process, or exit 2 naming what to run."""
    argv = list(sys.orig_argv if argv is None else argv)
    # Only a stage command (`python -m tasks.<stage>`): a tool that imports tasks (the GPU check on a bare
    # image) is left alone.
    if not any(a == "-m" and b.startswith("tasks.") for a, b in zip(argv, argv[1:])):
        return
    lacking = missing()
    if not lacking:
        return
    venv = root / ".venv" / "bin" / "python"
    # A venv's python links to its base interpreter: the venv is known by its prefix, not the binary.
    if venv.is_file() and os.access(venv, os.X_OK) and Path(sys.prefix).resolve() != venv.parents[1].resolve():
        os.execv(venv, [str(venv), *argv[1:]])
    raise SystemExit(
        f"error: {sys.executable} lacks this project's packages ({', '.join(lacking)}), and {venv} is not there: "
        "run `make setup`, then `source .venv/bin/activate` (or run the command through make)"
    )


if __name__ == "__main__":  # python -m tasks.interpreter: the environment a stage runs in
    print(sys.prefix)
