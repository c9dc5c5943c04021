"""File I/O with two guarantees: writes are atomic, and content is hashed the same way everywhere."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path, PurePath
from typing import Any

# Files that tools write beside the code on a user's machine: Python's bytecode caches and compiled
# modules (an import writes the caches) and macOS Finder's folder settings. No folder hash of the
# project's sees one, as DVC sees none: the same patterns are in .dvcignore (tests/unit/test_io.py
# holds the two together), a name pattern matching a file or a folder, a folder name only folders.
TOOL_DIRS = frozenset({"__pycache__"})
TOOL_PATTERNS = ("*.py[cod]", ".DS_Store")


def written_by_tools(relative: str | Path) -> bool:
    """Whether the file at ``relative`` (a path inside a hashed folder) is one tools write beside the
    code, or lies in a folder that is."""
    parts = PurePath(relative).parts
    named = any(fnmatchcase(part, pattern) for part in parts for pattern in TOOL_PATTERNS)
    return named or not TOOL_DIRS.isdisjoint(parts[:-1])


def files_in(folder: Path, pattern: str = "*") -> list[Path]:
    """The files under ``folder`` (at any depth) whose names match ``pattern``, sorted, less those
    tools write beside the code (:func:`written_by_tools`)."""
    return sorted(f for f in folder.rglob(pattern) if f.is_file() and not written_by_tools(f.relative_to(folder)))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Write to a temporary file beside ``path`` and rename it into place on success.

    An interrupted stage leaves either the old file or none, never a half-written one that
    DVC or a later stage would take for complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]], *, allow_nan: bool = True) -> int:
    """Write one JSON object per line as UTF-8, atomically; returns the row count.

    ``allow_nan=False`` makes every line strict JSON (RFC 8259 has no NaN/Infinity): such a value
    raises ``ValueError`` instead of being written as the bare ``NaN`` most JSON readers reject.
    """
    n = 0
    with atomic_write(path, "wb") as fh:  # bytes: UTF-8 whatever the locale
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True, allow_nan=allow_nan).encode("utf-8") + b"\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON Lines file; a line that is not UTF-8 JSON raises ``ValueError`` naming file and line."""
    rows = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line.decode("utf-8")))
            except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, an over-long int, deep nesting
                raise ValueError(f"{path}, line {number}: not a UTF-8 JSON row ({type(exc).__name__}: {exc})") from None
    return rows


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")


def sha256_file(path: str | Path) -> str:
    """Hex digest of one file, read in 1 MiB blocks (checkpoints and models can be many GB)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_paths(paths: Iterable[str | Path], root: str | Path | None = None) -> str:
    """One digest over files and directories (recursively), independent of listing order.

    Each file contributes its path (relative to ``root`` when given) and its bytes, so a
    rename changes the digest as well as an edit. In a directory, the files tools write beside the
    code (:func:`written_by_tools`) are left out.
    """
    files: list[tuple[str, Path]] = []
    for p in map(Path, paths):
        for f in files_in(p) if p.is_dir() else [p]:
            name = f.relative_to(root).as_posix() if root else f.as_posix()
            files.append((name, f))
    h = hashlib.sha256()
    for name, f in sorted(files):
        h.update(name.encode() + b"\0")
        h.update(bytes.fromhex(sha256_file(f)))
    return h.hexdigest()
