"""What makes a run reproducible: the code version and the hashes of its inputs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from grpoflow.io import sha256_paths


def git_commit(cwd: str | Path = ".") -> tuple[str, bool]:
    """``(commit sha, dirty)`` of the checkout at ``cwd``; ``("unknown", True)`` outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return sha.stdout.strip(), bool(status.stdout.strip())


def code_hash(*paths: str | Path, root: str | Path = ".") -> str:
    """Digest of source files (e.g. the verifiers package): changes whenever any of them does."""
    existing = [Path(root) / p for p in paths if (Path(root) / p).exists()]
    return sha256_paths(existing, root=root)


def copy_checkout(src: str | Path, dest: str | Path) -> Path:
    """Copy what a clone of ``src`` would hold, plus untracked files git does not ignore, to
    ``dest``: a scratch project for end-to-end tests and benchmarks, without run outputs."""
    src, dest = Path(src), Path(dest)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=src,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    for rel in filter(None, listed):
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    return dest
