"""Resumable checkpoints: DeepSpeed's (model, optimizer, scheduler) plus the loop's own state
(step, adaptive beta, RNG of every process, health history) and a fingerprint of the inputs, so
that a checkpoint of a different configuration is never resumed by mistake.

Layout of a checkpoint directory ``<dir>``::

    <dir>/step_000006/              the policy engine's files, fingerprint.json, rng_rank<r>.pt, manifest.json
    <dir>/<engine>/step_000006/     each extra engine's files (e.g. PPO's critic)
    <dir>/latest                    "step_000006": the newest complete checkpoint of the inputs last run
    <dir>/other_fingerprints/<fp>/  checkpoints of other inputs, parked with the same layout

**Complete** means: ``manifest.json`` is a JSON object ``{"step": <its step>, "files": {path: sha256}}``
whose paths are plain relative paths inside this checkpoint (``step_N/...`` or ``<engine>/step_N/...``,
no ``..``, no link leading out of ``<dir>``); it lists ``fingerprint.json``, rank 0's RNG state and
the model states of the policy and of every extra engine being loaded; it lists every file of the
checkpoint on disk (so nothing DeepSpeed reads is unverified); and every listed file matches its
sha256. The manifest is written after every other file and ``latest`` after the manifest, so an
interrupted save is never complete; loading falls back to the newest complete checkpoint.

**Fingerprints.** Only one set of inputs is *active* at the top level of ``<dir>``. A run with other
inputs parks the active checkpoints under ``other_fingerprints/<fp>/`` (renames, no copies) and
brings its own back from there if it has any, so changing a param and changing it back resumes the
old checkpoints. Pruning keeps the ``keep`` newest of the active inputs only; at most
``keep_fingerprints`` parked sets are kept (the least recently parked ones are deleted, with a
warning), so the directory holds at most ``(1 + keep_fingerprints) * keep`` checkpoints.

**Several processes.** Rank 0 alone reorganises the directory and decides the step to resume
from; every rank loads that step (``agree``), and a rank that cannot is an error, never a silent
divergence.

**No pickle runs code.** Every file is read with ``torch.load(weights_only=True)``: the RNG state
here, and DeepSpeed's model and optimizer states through its checkpoint engine, which loads with
``weights_only=False`` by default and is wrapped for the length of a load (:class:`WeightsOnlyLoads`);
only tensors, containers and the few DeepSpeed classes its states hold (:func:`checkpoint_globals`)
are rebuilt. A planted file whose ``__reduce__`` runs a command is refused, with a valid manifest too.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from grpoflow.io import atomic_write, sha256_file, write_json
from grpoflow.lora import merged_model
from grpoflow.rl import LoopState

MANIFEST = "manifest.json"
FINGERPRINT = "fingerprint.json"
LATEST = "latest"
OTHER = "other_fingerprints"
KEEP_FINGERPRINTS = 2
_STEP_NAME = re.compile(r"step_([0-9]{6,})")
_SAFE_FINGERPRINT = re.compile(r"[0-9A-Za-z_-]{1,128}")  # used as a folder name: no '/', no '..'
_SHA256 = re.compile(r"[0-9a-f]{64}")
_log = logging.getLogger(__name__)
T = TypeVar("T")


class CheckpointError(RuntimeError):
    """A checkpoint that passed its checks could not be loaded on every process."""


def _has_frozen(engine) -> bool:
    """Whether some of the engine's weights do not train (LoRA: the base model under the adapters)."""
    return any(not p.requires_grad for p in engine.module.parameters())


def _tag(step: int) -> str:
    return f"step_{step:06d}"


def _step_of(name: str) -> int | None:
    """The step of a checkpoint folder name, only in the canonical form ``_tag`` writes."""
    match = _STEP_NAME.fullmatch(name)
    return int(match[1]) if match and _tag(int(match[1])) == name else None


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


# ---------------------------------------------------------------- layout


def _engine_dirs(directory: Path) -> list[Path]:
    """The extra engines' folders: every sub-folder that is neither a step nor the parking area."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_dir() and p.name != OTHER and _step_of(p.name) is None)


def _parts(directory: Path, step: int) -> list[Path]:
    """The folders of checkpoint ``step`` that exist: the extra engines' first, the policy's (with
    the manifest) last, so that moving or deleting them in this order never leaves a part behind
    that a later retry would not find through the policy's folder."""
    tag = _tag(step)
    parts = [d / tag for d in _engine_dirs(directory) if (d / tag).is_dir()]
    return parts + ([directory / tag] if (directory / tag).is_dir() else [])


def _files_of(directory: Path, tag: str) -> list[Path]:
    """Every file of checkpoint ``tag`` but its manifest: the policy's folder and each engine's."""
    dirs = [directory / tag] + [d / tag for d in _engine_dirs(directory)]
    manifest = directory / tag / MANIFEST
    return sorted(p for d in dirs if d.is_dir() for p in d.rglob("*") if p.is_file() and p != manifest)


def saved_steps(directory: str | Path) -> list[int]:
    """Steps of the active checkpoints in ``directory``, newest first (complete or not)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = (_step_of(p.name) for p in directory.iterdir() if p.is_dir())
    return sorted((s for s in steps if s is not None), reverse=True)


def latest_step(directory: str | Path) -> int | None:
    """The step ``<directory>/latest`` names, or None when it is absent or unreadable."""
    marker = Path(directory) / LATEST
    try:
        return _step_of(marker.read_bytes().decode("ascii").strip())
    except (OSError, UnicodeDecodeError):
        return None


def _fingerprint_of(directory: Path, step: int) -> str | None:
    """The fingerprint checkpoint ``step`` was made from, None when unknown (a cheap read, no hashing)."""
    try:
        meta = json.loads((directory / _tag(step) / FINGERPRINT).read_bytes().decode("utf-8"))
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
    ours = parts[0] == tag or (len(parts) > 2 and parts[1] == tag and parts[0] != OTHER and _step_of(parts[0]) is None)
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
    tag = _tag(step)
    listed, problem = _read_manifest(directory / tag / MANIFEST, step)
    problem = problem or next(filter(None, (_path_problem(directory, tag, rel) for rel in listed)), None)
    problem = problem or _completeness_problem(tag, listed, engines)
    if problem:
        return problem
    unlisted = sorted({p.relative_to(directory).as_posix() for p in _files_of(directory, tag)} - set(listed))
    if unlisted:
        return f"{unlisted[0]} is not in the manifest"
    for rel, digest in sorted(listed.items()):
        if not (directory / rel).is_file():
            return f"{rel} is missing"
        if sha256_file(directory / rel) != digest:
            return f"{rel} does not match its checksum"
    return None


# ---------------------------------------------------------------- which step, on every rank


def resume_point(directory: str | Path, fingerprint: str, engines: Iterable[str] = ()) -> tuple[int | None, list[str]]:
    """``(the newest complete checkpoint of these inputs or None, the newer ones skipped with the
    reason)``. Checkpoints of other inputs are passed over, not reported. Rank 0's decision."""
    directory = Path(directory)
    engines = list(engines)
    skipped: list[str] = []
    for step in saved_steps(directory):
        made_from = _fingerprint_of(directory, step)
        if made_from is not None and made_from != fingerprint:
            continue
        problem = verify(directory, step, engines)
        if problem is None:
            return step, skipped
        skipped.append(f"{_tag(step)}: {problem}")
    return None, skipped


def agree(decide: Callable[[], T]) -> T:
    """``decide()`` as rank 0 computes it, on every rank (broadcast), so that all processes resume
    from the same step even where their views of the disk differ. On one process: ``decide()``."""
    if _world() == 1:
        return decide()
    box: list = [None]
    if _rank() == 0:
        try:
            box = [("ok", decide())]
        except Exception as exc:  # the other ranks wait on the broadcast: tell them, then fail together
            box = [("error", f"{type(exc).__name__}: {exc}")]
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "error":
        raise CheckpointError(f"rank 0 could not choose the checkpoint to resume: {value}")
    return value


def _problems_of_all_ranks(problem: str | None) -> list[tuple[int, str]]:
    """``(rank, problem)`` for every rank that reports one."""
    if _world() == 1:
        return [(0, problem)] if problem else []
    gathered: list = [None] * _world()
    dist.all_gather_object(gathered, problem)
    return [(rank, p) for rank, p in enumerate(gathered) if p]


# ---------------------------------------------------------------- fingerprint folders (rank 0)


def _move_step(src: Path, dst: Path, step: int) -> None:
    """Rename every part of checkpoint ``step`` from ``src`` into ``dst`` (same layout)."""
    for part in _parts(src, step):
        target = dst / part.relative_to(src)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, target)


def _remove_step(directory: Path, step: int) -> None:
    """Delete checkpoint ``step``, its manifest first so that it stops counting at once."""
    (directory / _tag(step) / MANIFEST).unlink(missing_ok=True)
    for part in _parts(directory, step):
        shutil.rmtree(part, ignore_errors=True)


def _steps_text(steps: Iterable[int]) -> str:
    return ", ".join(str(s) for s in sorted(steps))


def _park_others(directory: Path, fingerprint: str) -> None:
    """Move the top-level checkpoints of other inputs to ``other_fingerprints/<their fp>/``."""
    parked: dict[str, list[int]] = {}
    for step in saved_steps(directory):
        made_from = _fingerprint_of(directory, step)
        if made_from is not None and made_from != fingerprint:
            _move_step(directory, directory / OTHER / made_from, step)
            parked.setdefault(made_from, []).append(step)
    for made_from, steps in parked.items():
        home = directory / OTHER / made_from
        os.utime(home, ns=(time.time_ns(), time.time_ns()))  # the eviction order: least recently parked first
        _log.warning(
            "%s: checkpoints of other inputs (fingerprint %s, steps %s) moved to %s; a run with those "
            "inputs resumes them again",
            directory,
            made_from,
            _steps_text(steps),
            home,
        )


def _unpark(directory: Path, fingerprint: str) -> None:
    """Bring this fingerprint's parked checkpoints back to the top level."""
    home = directory / OTHER / fingerprint
    if not home.is_dir():
        return
    steps = saved_steps(home)
    for step in steps:
        if (directory / _tag(step)).is_dir():
            if _fingerprint_of(directory, step) == fingerprint:
                _remove_step(home, step)  # the same inputs and step twice: keep the one in place
                continue
            _remove_step(directory, step)  # debris of an unknown save in the way
        _move_step(home, directory, step)
    shutil.rmtree(home)
    if steps:
        _log.warning(
            "%s: resuming the checkpoints of these inputs (steps %s) kept in %s", directory, _steps_text(steps), home
        )


def _evict(directory: Path, keep_fingerprints: int) -> None:
    """Delete the parked sets beyond the ``keep_fingerprints`` most recently parked."""
    root = directory / OTHER
    if not root.is_dir():
        return
    homes = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for home in homes[max(keep_fingerprints, 0) :]:
        _log.warning(
            "%s: deleted the checkpoints of fingerprint %s (steps %s): the checkpoints of at most %d "
            "other sets of inputs are kept",
            directory,
            home.name,
            _steps_text(saved_steps(home)),
            keep_fingerprints,
        )
        shutil.rmtree(home)
    if not any(root.iterdir()):
        root.rmdir()


def _refresh_latest(directory: Path, fingerprint: str) -> None:
    """Point ``latest`` at the newest checkpoint of these inputs that has a manifest; remove it when none."""
    marker = directory / LATEST
    ours = [
        s
        for s in saved_steps(directory)
        if (directory / _tag(s) / MANIFEST).is_file() and _fingerprint_of(directory, s) == fingerprint
    ]
    if not ours:
        marker.unlink(missing_ok=True)
    elif latest_step(directory) != ours[0]:
        with atomic_write(marker) as fh:
            fh.write(_tag(ours[0]))


def _activate(directory: Path, fingerprint: str, keep_fingerprints: int) -> None:
    """Make ``fingerprint`` the top-level set: park the others, unpark its own, bound the parked sets."""
    if not directory.is_dir():
        return
    _park_others(directory, fingerprint)
    _unpark(directory, fingerprint)
    _evict(directory, keep_fingerprints)
    _refresh_latest(directory, fingerprint)


def _prune(directory: Path, fingerprint: str, keep: int, saved: int) -> None:
    """Keep the ``keep`` newest checkpoints of these inputs up to ``saved``. Newer ones of the same
    inputs belong to a run this one resumed past (they failed their checks); saves of unknown inputs
    older than ``saved`` are interrupted ones. Checkpoints of other inputs are left alone."""
    ours = [s for s in saved_steps(directory) if _fingerprint_of(directory, s) == fingerprint]
    doomed = [s for s in ours if s > saved] + [s for s in ours if s <= saved][max(keep, 1) :]
    unknown = [s for s in saved_steps(directory) if s < saved and _fingerprint_of(directory, s) is None]
    if unknown:
        _log.warning("%s: deleted incomplete checkpoints of unknown inputs (steps %s)", directory, _steps_text(unknown))
    for step in doomed + unknown:
        _remove_step(directory, step)


# ---------------------------------------------------------------- save and load


def _prepare_save(directory: Path, fingerprint: str, step: int, keep_fingerprints: int) -> None:
    """Rank 0, before any engine writes: the top level holds these inputs, an older save of the same
    step is gone (its files must not be listed as the new one's), and the fingerprint goes first so
    that even an interrupted save is attributable to its inputs."""
    directory.mkdir(parents=True, exist_ok=True)
    _activate(directory, fingerprint, keep_fingerprints)
    _remove_step(directory, step)
    _refresh_latest(directory, fingerprint)
    write_json(directory / _tag(step) / FINGERPRINT, {"fingerprint": fingerprint, "step": step})


def _finish_save(directory: Path, fingerprint: str, step: int, keep: int) -> None:
    """Rank 0, after every rank wrote: the manifest, then ``latest``, then pruning."""
    tag = _tag(step)
    files = {p.relative_to(directory).as_posix(): sha256_file(p) for p in _files_of(directory, tag)}
    write_json(directory / tag / MANIFEST, {"step": step, "fingerprint": fingerprint, "files": files})
    with atomic_write(directory / LATEST) as fh:
        fh.write(tag)
    _prune(directory, fingerprint, keep, step)


def save(
    engine,
    directory: str | Path,
    state: LoopState,
    fingerprint: str,
    *,
    extra_engines: dict | None = None,
    extra: dict | None = None,
    keep: int = 2,
    keep_fingerprints: int = KEEP_FINGERPRINTS,
) -> Path:
    """Save the policy engine (with the loop state) and any ``extra_engines`` (e.g. PPO's critic,
    under ``<directory>/<name>``). Then rank 0 writes the checksum manifest and, last, the
    ``latest`` marker, so a checkpoint counts only once every byte of it is on disk; only the
    ``keep`` newest of these inputs are kept (see the module docstring for other inputs)."""
    directory = Path(directory)
    tag = _tag(state.step)
    rank = _rank()
    # Through agree(): an error on rank 0 fails every rank instead of leaving them at a barrier.
    agree(lambda: _prepare_save(directory, fingerprint, state.step, keep_fingerprints))
    for name, other in (extra_engines or {}).items():
        other.save_checkpoint(str(directory / name), tag=tag, save_latest=False)
    client = {
        "loop": {"step": state.step, "beta": state.beta, "backoff": state.backoff},
        "fingerprint": fingerprint,
        **(extra or {}),
    }
    # Frozen weights (a LoRA run's base model) are the reference's, not training state: only the
    # trainable ones and their optimizer state are saved, and loaded back non-strictly.
    engine.save_checkpoint(
        str(directory), tag=tag, client_state=client, save_latest=False, exclude_frozen_parameters=_has_frozen(engine)
    )
    # Only tensors, tuples and numbers: readable by torch.load(weights_only=True).
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, directory / tag / f"rng_rank{rank}.pt")
    _barrier()
    agree(lambda: _finish_save(directory, fingerprint, state.step, keep))
    return directory / tag


@dataclass
class Resumed:
    """What :func:`load` restored: the loop state and the caller's ``extra`` of :func:`save`."""

    state: LoopState
    extra: dict


def load(
    engine,
    directory: str | Path,
    fingerprint: str,
    extra_engines: dict | None = None,
    *,
    keep_fingerprints: int = KEEP_FINGERPRINTS,
) -> tuple[Resumed | None, list[str]]:
    """``(the newest intact checkpoint of these inputs, loaded into the engines, or None; the
    newer checkpoints skipped as truncated or corrupted, each with the reason)``. With None,
    training starts over; a checkpoint made from other inputs is never loaded. Every rank resumes
    the step rank 0 chose; :class:`CheckpointError` when some rank cannot."""
    directory = Path(directory)
    engines = dict(extra_engines or {})
    step, skipped = agree(lambda: _activate_and_choose(directory, fingerprint, list(engines), keep_fingerprints))
    if step is None:
        return None, skipped
    error: Exception | None = None
    try:
        resumed, problem = _load_tag(engine, directory, step, fingerprint, engines)
    except Exception as exc:  # raised on one rank alone, it would leave the others waiting in the gather below
        resumed, problem, error = None, f"{type(exc).__name__}: {exc}", exc
    failures = _problems_of_all_ranks(problem)
    if failures:
        detail = "; ".join(f"rank {rank}: {p}" for rank, p in failures)
        raise CheckpointError(
            f"{directory / _tag(step)} passed its checks but cannot be resumed ({detail}). Move it "
            f"out of {directory} to resume an older checkpoint, or delete {directory} to start "
            "over."
        ) from error
    return resumed, skipped


def _activate_and_choose(
    directory: Path, fingerprint: str, engines: list[str], keep_fingerprints: int
) -> tuple[int | None, list[str]]:
    """Rank 0: make these inputs the active ones, then choose the step to resume."""
    _activate(directory, fingerprint, keep_fingerprints)
    return resume_point(directory, fingerprint, engines)


def checkpoint_globals() -> list[Any]:
    """The classes beyond tensors and containers that DeepSpeed's checkpoint files hold (ZeRO 0-3, fp32
    and bf16, as ``torch.serialization.get_unsafe_globals_in_checkpoint`` lists them): the loss
    scaler, the ZeRO stage and the optimizer's fragment addresses. Plain data, no code on load."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


class WeightsOnlyLoads:
    """A DeepSpeed checkpoint engine whose ``load`` uses torch's restricted unpickler
    (``weights_only=True``, :func:`checkpoint_globals` allowed); everything else is the wrapped engine's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def load(self, path: str, map_location: Any = None) -> Any:
        """``torch.load(path, weights_only=True)``: a pickle that would run code raises instead."""
        with torch.serialization.safe_globals(checkpoint_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)


@contextmanager
def weights_only_loads(engines: Iterable[Any]) -> Iterator[None]:
    """Every checkpoint file the ``engines`` read meanwhile is loaded by :class:`WeightsOnlyLoads`.
    (DeepSpeed's default engine unpickles with ``weights_only=False``: a planted ``__reduce__`` would
    run on resume, and the manifest's checksums, kept next to the files, prove nothing against that.)"""
    swapped = []
    for engine in engines:
        inner = getattr(engine, "checkpoint_engine", None)
        if inner is not None and not isinstance(inner, WeightsOnlyLoads):
            engine.checkpoint_engine = WeightsOnlyLoads(inner)
            swapped.append((engine, inner))
    try:
        yield
    finally:
        for engine, inner in swapped:
            engine.checkpoint_engine = inner


def _load_tag(engine, directory: Path, step: int, fingerprint: str, engines: dict) -> tuple[Resumed | None, str | None]:
    """Load checkpoint ``step`` into the engines: ``(what was resumed, None)`` or ``(None, the problem)``."""
    with weights_only_loads([engine, *engines.values()]):
        return _load_engines(engine, directory, step, fingerprint, engines)


def _load_engines(
    engine, directory: Path, step: int, fingerprint: str, engines: dict
) -> tuple[Resumed | None, str | None]:
    tag = _tag(step)
    # The frozen weights were not saved: load the rest non-strictly.
    path, client = engine.load_checkpoint(str(directory), tag=tag, load_module_strict=not _has_frozen(engine))
    if path is None:
        return None, f"DeepSpeed could not load {directory / tag}"
    loop = client.get("loop") if isinstance(client, dict) else None
    if not isinstance(client, dict) or client.get("fingerprint") != fingerprint:
        return None, "its client state was made from other inputs"
    if not isinstance(loop, dict) or loop.get("step") != step or not isinstance(loop.get("beta"), (int, float)):
        return None, f"its client state has no valid 'loop' for step {step}"
    for name, other in engines.items():
        if other.load_checkpoint(str(directory / name), tag=tag)[0] is None:
            return None, f"DeepSpeed could not load {directory / name / tag}"
    rng, problem = _read_rng(directory / tag / f"rng_rank{_rank()}.pt")
    if problem:
        return None, problem
    extra = {k: v for k, v in client.items() if k not in ("loop", "fingerprint")}
    saved_backoff = loop.get("backoff")
    backoff: dict = saved_backoff if isinstance(saved_backoff, dict) else {}
    return Resumed(LoopState(step=step, beta=float(loop["beta"]), rng=rng, backoff=backoff), extra), None


def _read_rng(path: Path) -> tuple[dict, str | None]:
    """This rank's RNG state, read without unpickling code; ``{}`` when the run had fewer ranks."""
    if not path.is_file():
        return {}, None
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:  # the restricted unpickler's refusals and damaged files alike
        return {}, f"{path} is not a plain RNG state ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    problem = _rng_problem(state)
    return ({}, f"{path}: {problem}") if problem else (state, None)


def _rng_problem(state: object) -> str | None:
    """What makes ``state`` unusable as ``{"python": random.getstate(), "torch": torch.get_rng_state()}``."""
    if not isinstance(state, dict) or set(state) != {"python", "torch"}:
        return "expected a dict with keys 'python' and 'torch'"
    try:
        random.Random().setstate(state["python"])  # validates without touching the global generator
    except (TypeError, ValueError) as exc:
        return f"'python' is not a random.getstate() value ({exc})"
    t = state["torch"]
    reference = torch.get_rng_state()
    if not isinstance(t, torch.Tensor) or t.dtype != reference.dtype or t.shape != reference.shape:
        return "'torch' is not a torch.get_rng_state() tensor"
    return None


def export_model(engine, tokenizer, path: str | Path) -> None:
    """Save the trained policy as a plain Hugging Face checkpoint (gathering ZeRO-3 shards)."""
    from grpoflow.engine import import_deepspeed

    deepspeed = import_deepspeed()

    module = engine.module
    rank = _rank()
    with deepspeed.zero.GatheredParameters(list(module.parameters()), enabled=engine.zero_optimization_stage() == 3):
        if rank == 0:
            merged_model(module).save_pretrained(path)  # LoRA: the adapters merged into a plain model
            tokenizer.save_pretrained(path)
