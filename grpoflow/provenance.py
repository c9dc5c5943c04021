"""What makes a run reproducible: the code version and the hashes of its inputs."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path

from grpoflow import catalog
from grpoflow.io import sha256_paths

# Where a flow run journals the files it rewrites for its length (dvc.yaml for another set, a params file with
# overrides): flows/workspace.py writes it, and git_commit reads it to tell those rewrites from the user's edits.
RUN_EDITS_JOURNAL = Path(".grpoflow/restore.json")


def git_commit(cwd: str | Path = ".") -> tuple[str, bool]:
    """``(commit sha, dirty)`` of the checkout at ``cwd``; ``("unknown", True)`` outside git. Dirty means a
    tracked file differs from the commit, the running flow's own temporary rewrites aside: a file in its
    journal counts as what it was before the run rewrote it (the overrides are recorded on their own)."""
    try:
        sha = _git(cwd, "rev-parse", "HEAD").strip()
        status = _git(cwd, "status", "--porcelain", "--untracked-files=no", "-z")
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    changed = [entry[3:] for entry in status.split("\0") if entry[3:]]
    rewritten = _run_rewrites(Path(cwd))
    return sha, any(path not in rewritten or rewritten[path] != _committed(cwd, path) for path in changed)


def _git(cwd: str | Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def _run_rewrites(root: Path) -> dict[str, str | None]:
    """Each file the running flow rewrote, with its text before (None: it did not exist), from its journal."""
    try:
        entries = json.loads((root / RUN_EDITS_JOURNAL).read_text())["files"]
        return {path: entry["original"] for path, entry in entries.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _committed(cwd: str | Path, path: str) -> str | None:
    """``path``'s text at HEAD (None: not in the commit)."""
    try:
        return _git(cwd, "show", f"HEAD:{path}")
    except subprocess.CalledProcessError:
        return None


def code_hash(*paths: str | Path, root: str | Path = ".") -> str:
    """Digest of source files (e.g. the verifiers package): changes whenever any of them does."""
    existing = [Path(root) / p for p in paths if (Path(root) / p).exists()]
    return sha256_paths(existing, root=root)


def copy_checkout(src: str | Path, dest: str | Path) -> Path:
    """Copy what a clone of ``src`` would hold, plus untracked files git does not ignore, to
    ``dest``: a scratch project for end-to-end tests and benchmarks, without run outputs. An
    untracked file that a run wrote (``dvc.lock``, a stage's outputs, metrics and plots as dvc.yaml
    declares them, the ``.gitignore`` files DVC adds beside them) is left out: after ``make demo``
    the copy still starts as a clone does."""
    src, dest = Path(src), Path(dest)

    def listed(*which: str) -> list[str]:
        out = subprocess.run(["git", "ls-files", *which], cwd=src, capture_output=True, text=True, check=True)
        return [rel for rel in out.stdout.split("\n") if rel]

    outputs = run_outputs(src)
    untracked = [
        rel
        for rel in listed("--others", "--exclude-standard")
        if not (rel == "dvc.lock" or Path(rel).name == ".gitignore" or _under(rel, outputs))
    ]
    for rel in [*listed("--cached"), *untracked]:
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    return dest


def run_outputs(root: Path) -> list[str]:
    """The paths dvc.yaml's stages write (outs, metrics, plots, each a file or a folder), and its top level's
    metrics and plots."""
    import yaml

    path = root / "dvc.yaml"
    spec = yaml.safe_load(path.read_text()) if path.is_file() else None
    found: list[str] = []
    for stage in (spec or {}).get("stages", {}).values():
        for key in ("outs", "metrics", "plots"):
            found += [next(iter(e)) if isinstance(e, dict) else e for e in stage.get(key) or []]
    for key in ("metrics", "plots"):  # the top level's: the flow's run record, the plots' sources
        found += [next(iter(e)) if isinstance(e, dict) else e for e in (spec or {}).get(key) or []]
    return [str(p).rstrip("/") for p in found if isinstance(p, str) and "${" not in p]


def _under(rel: str, paths: list[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in paths)


# The project's own top-level packages: the import graph is followed inside them only.
PROJECT_PACKAGES = ("grpoflow", "verifiers", "tasks", "flows")


def _module_path(name: str, root: Path) -> Path | None:
    """The source file of project module ``name`` under ``root`` (a package's __init__.py), if any."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path, name: str) -> set[str]:
    """Project modules that the file of module ``name`` imports anywhere in it (lazy imports too),
    with their parent packages, whose __init__ runs first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return set(_imports_in(path.read_text(), str(path), package))


@cache
def _imports_in(source: str, filename: str, package: str) -> frozenset[str]:
    """:func:`_imported` of the file ``filename`` holding ``source``. Keyed by the text itself, so
    an edited file is parsed again; every stage's graph walks the same shared modules, and parsing
    them is the walk's cost (dvc.yaml's generation walks each stage's)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(p for p in [*parent, base] if p)
            # ``from pkg import x``: x may be a submodule or a name; a name simply has no file.
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    with_parents = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 2)}
    return frozenset(m for m in with_parents if m.split(".")[0] in PROJECT_PACKAGES)


def module_files(*modules: str, root: str | Path = ".") -> list[str]:
    """The project source files (paths relative to ``root``) that importing ``modules`` loads,
    directly or not: the static import graph, lazy imports included, so that a change to any of
    them is a change to what those modules do."""
    root = Path(root)
    seen: dict[str, Path] = {}
    stack = [m for name in modules for m in _imported_self(name)]
    while stack:
        name = stack.pop()
        path = _module_path(name, root)
        if path is None or name in seen:
            continue
        seen[name] = path
        stack.extend(_imported(path, name) - seen.keys())
        if name == catalog.__name__:  # it imports each algorithm's settings by name (the schema reads them)
            stack.extend(m for loaded in _catalog_loads() for m in _imported_self(loaded) if m not in seen)
    return sorted({p.relative_to(root).as_posix() for p in seen.values()})


def _catalog_loads() -> list[str]:
    """The modules :mod:`grpoflow.catalog` loads by name: each algorithm's settings (its folder's
    ``__init__`` comes with it as its package)."""
    return [e.config for e in catalog.ALGORITHMS.values() if e.config]


def _imported_self(name: str) -> list[str]:
    """``name`` and its parent packages."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
