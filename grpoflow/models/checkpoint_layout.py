"""Where a checkpoint's files lie, and whether a checkpoint is complete.

The layout, what *complete* means and why are described in :mod:`grpoflow.models.checkpoint`; this module
reads a checkpoint directory (steps, the newest, the fingerprint each was made from) and verifies
one checkpoint against its manifest, without loading anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from grpoflow.io import files_in, sha256_file, written_by_tools

MANIFEST = "manifest.json"
FINGERPRINT = "fingerprint.json"
LATEST = "latest"
OTHER = "other_fingerprints"
_STEP_NAME = re.compile(r"step_([0-9]{6,})")
_SAFE_FINGERPRINT = re.compile(r"[0-9A-Za-z_-]{1,128}")  # used as a folder name: no '/', no '..'
_SHA256 = re.compile(r"[0-9a-f]{64}")


def step_tag(step: int) -> str:
    """The folder name of checkpoint ``step``."""
    return f"step_{step:06d}"


def step_of(name: str) -> int | None:
    """The step of a checkpoint folder name, only in the canonical form ``step_tag`` writes."""
    match = _STEP_NAME.fullmatch(name)
    return int(match[1]) if match and step_tag(int(match[1])) == name else None


# ---------------------------------------------------------------- layout


def engine_dirs(directory: Path) -> list[Path]:
    """The extra engines' folders: every sub-folder that is neither a step nor the parking area."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and p.name != OTHER and step_of(p.name) is None)


def step_parts(directory: Path, step: int) -> list[Path]:
    """The folders of checkpoint ``step`` that exist: the extra engines' first, the policy's (with
    the manifest) last, so that moving or deleting them in this order never leaves a part behind
    that a later retry would not find through the policy's folder."""
    tag = step_tag(step)
    parts = [d / tag for d in engine_dirs(directory) if (d / tag).is_dir()]
    return parts + ([directory / tag] if (directory / tag).is_dir() else [])


def files_of(directory: Path, tag: str) -> list[Path]:
    """Every file of checkpoint ``tag`` but its manifest: the policy's folder and each engine's, less
    what tools write there (:func:`grpoflow.io.written_by_tools`: a Finder window on the folder)."""
    dirs = [directory / tag] + [d / tag for d in engine_dirs(directory)]
    manifest = directory / tag / MANIFEST
    return sorted(p for d in dirs if d.is_dir() for p in files_in(d) if p != manifest)


def saved_steps(directory: str | Path) -> list[int]:
    """Steps of the active checkpoints in ``directory``, newest first (complete or not)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = (step_of(p.name) for p in directory.iterdir() if p.is_dir())
    return sorted((s for s in steps if s is not None), reverse=True)


def latest_step(directory: str | Path) -> int | None:
    """The step ``<directory>/latest`` names, or None when it is absent or unreadable."""
    marker = Path(directory) / LATEST
    try:
        return step_of(marker.read_bytes().decode("ascii").strip())
    except (OSError, UnicodeDecodeError):
        return None


def fingerprint_of(directory: Path, step: int) -> str | None:
    """The fingerprint checkpoint ``step`` was made from, None when unknown (a cheap read, no hashing)."""
    try:
        meta = json.loads((directory / step_tag(step) / FINGERPRINT).read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    fp = meta.get("fingerprint") if isinstance(meta, dict) else None
    return fp if isinstance(fp, str) and _SAFE_FINGERPRINT.fullmatch(fp) else None


# ---------------------------------------------------------------- verification


def _read_manifest(manifest: Path, step: int) -> tuple[dict[str, str], str | None]:
    """The manifest's ``files`` (path -> sha256), or what makes it unusable."""
    if not manifest.is_file():
        return {}, "no manifest (the save was interrupted)"
    try:
        data = json.loads(manifest.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        return {}, f"{manifest} is not UTF-8 text"
    except json.JSONDecodeError as exc:
        return {}, f"{manifest} is not valid JSON ({exc.msg} at line {exc.lineno})"
    except (OSError, ValueError, RecursionError) as exc:
        return {}, f"{manifest} cannot be read ({type(exc).__name__})"
    if not isinstance(data, dict):
        return {}, f"{manifest}: expected a JSON object, found a {type(data).__name__}"
    files = data.get("files")
    if not isinstance(files, dict):
        return {}, f"{manifest}: field 'files' is missing or not an object"
    if type(data.get("step")) is not int or data["step"] != step:
        return {}, f"{manifest}: field 'step' is {data.get('step')!r}, expected {step}"
    for rel, digest in files.items():
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            return {}, f"{manifest}: files[{rel!r}] is not a sha256 hex digest"
    return files, None


def _path_problem(directory: Path, tag: str, rel: str) -> str | None:
    """Why manifest entry ``rel`` may not be opened, or None: it must name a file of this checkpoint."""
    plain = rel and "\\" not in rel and "\0" not in rel and rel.isprintable() and not rel.startswith("/")
    parts = rel.split("/") if plain else []
    if not plain or any(part in ("", ".", "..") for part in parts):
        return f"manifest entry {rel!r} is not a plain relative path"
    ours = parts[0] == tag or (len(parts) > 2 and parts[1] == tag and parts[0] != OTHER and step_of(parts[0]) is None)
    if len(parts) < 2 or not ours:
        return f"manifest entry {rel!r} is outside checkpoint {tag}"
    try:
        inside = (directory / PurePosixPath(rel)).resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError, ValueError):
        inside = False
    return None if inside else f"manifest entry {rel!r} leads outside {directory} (through a symbolic link)"


def _completeness_problem(tag: str, listed: dict[str, str], engines: Iterable[str]) -> str | None:
    """What a complete checkpoint needs that the manifest does not list, or None."""
    for needed in (f"{tag}/{FINGERPRINT}", f"{tag}/rng_rank0.pt"):
        if needed not in listed:
            return f"the manifest does not list {needed}"
    for owner in [tag, *(f"{name}/{tag}" for name in engines)]:
        if not any(rel.startswith(owner + "/") and rel.endswith("model_states.pt") for rel in listed):
            return f"the manifest lists no model states under {owner}/"
    return None


def verify(directory: str | Path, step: int, engines: Iterable[str] = ()) -> str | None:
    """None when checkpoint ``step`` is complete and intact (see the module docstring), else what is
    wrong with it. ``engines``: the extra engines whose model states it must hold."""
    directory = Path(directory)
    tag = step_tag(step)
    listed, problem = _read_manifest(directory / tag / MANIFEST, step)
    problem = problem or next(filter(None, (_path_problem(directory, tag, rel) for rel in listed)), None)
    # A manifest written before files_of left them out may list a .DS_Store, which Finder rewrites at will.
    listed = {rel: digest for rel, digest in listed.items() if not written_by_tools(rel)}
    problem = problem or _completeness_problem(tag, listed, engines)
    if problem:
        return problem
    unlisted = sorted({p.relative_to(directory).as_posix() for p in files_of(directory, tag)} - set(listed))
    if unlisted:
        return f"{unlisted[0]} is not in the manifest"
    for rel, digest in sorted(listed.items()):
        if not (directory / rel).is_file():
            return f"{rel} is missing"
        if sha256_file(directory / rel) != digest:
            return f"{rel} does not match its checksum"
    return None
