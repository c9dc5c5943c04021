"""Resumable checkpoints: DeepSpeed's (model, optimizer, scheduler), the RNG of every process, the
caller's client state (the RL loop's, :mod:`grpoflow.rl.loop_state`: step, adaptive beta, health
history) and a fingerprint of the inputs, so that a checkpoint of a different configuration is never
resumed by mistake.

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

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from grpoflow.io import atomic_write, sha256_file, write_json
from grpoflow.models import rng
from grpoflow.models.checkpoint_folders import activate, prune, refresh_latest, remove_step
from grpoflow.models.checkpoint_layout import (
    FINGERPRINT,
    LATEST,
    MANIFEST,
    OTHER,
    files_of,
    fingerprint_of,
    latest_step,
    saved_steps,
    step_tag,
    verify,
)
from grpoflow.models.lora import merged_model

# The public names, the layout's (grpoflow.models.checkpoint_layout) included: importable from here.
__all__ = [
    "FINGERPRINT",
    "KEEP_FINGERPRINTS",
    "LATEST",
    "MANIFEST",
    "OTHER",
    "CheckpointError",
    "Restored",
    "WeightsOnlyLoads",
    "agree",
    "checkpoint_globals",
    "export_model",
    "latest_step",
    "load",
    "resume_point",
    "save",
    "saved_steps",
    "verify",
    "weights_only_loads",
]

KEEP_FINGERPRINTS = 2
T = TypeVar("T")


class CheckpointError(RuntimeError):
    """A checkpoint that passed its checks could not be loaded on every process."""


def _has_frozen(engine) -> bool:
    """Whether some of the engine's weights do not train (LoRA: the base model under the adapters)."""
    return any(not p.requires_grad for p in engine.module.parameters())


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


# ---------------------------------------------------------------- which step, on every rank


def resume_point(directory: str | Path, fingerprint: str, engines: Iterable[str] = ()) -> tuple[int | None, list[str]]:
    """``(the newest complete checkpoint of these inputs or None, the newer ones skipped with the
    reason)``. Checkpoints of other inputs are passed over, not reported. Rank 0's decision."""
    directory = Path(directory)
    engines = list(engines)
    skipped: list[str] = []
    for step in saved_steps(directory):
        made_from = fingerprint_of(directory, step)
        if made_from is not None and made_from != fingerprint:
            continue
        problem = verify(directory, step, engines)
        if problem is None:
            return step, skipped
        skipped.append(f"{step_tag(step)}: {problem}")
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


# ---------------------------------------------------------------- save and load


def _prepare_save(directory: Path, fingerprint: str, step: int, keep_fingerprints: int) -> None:
    """Rank 0, before any engine writes: the top level holds these inputs, an older save of the same
    step is gone (its files must not be listed as the new one's), and the fingerprint goes first so
    that even an interrupted save is attributable to its inputs."""
    directory.mkdir(parents=True, exist_ok=True)
    activate(directory, fingerprint, keep_fingerprints)
    remove_step(directory, step)
    refresh_latest(directory, fingerprint)
    write_json(directory / step_tag(step) / FINGERPRINT, {"fingerprint": fingerprint, "step": step})


def _finish_save(directory: Path, fingerprint: str, step: int, keep: int) -> None:
    """Rank 0, after every rank wrote: the manifest, then ``latest``, then pruning."""
    tag = step_tag(step)
    files = {p.relative_to(directory).as_posix(): sha256_file(p) for p in files_of(directory, tag)}
    write_json(directory / tag / MANIFEST, {"step": step, "fingerprint": fingerprint, "files": files})
    with atomic_write(directory / LATEST) as fh:
        fh.write(tag)
    prune(directory, fingerprint, keep, step)


def save(
    engine,
    directory: str | Path,
    step: int,
    fingerprint: str,
    *,
    client: dict | None = None,
    extra_engines: dict | None = None,
    keep: int = 2,
    keep_fingerprints: int = KEEP_FINGERPRINTS,
) -> Path:
    """Save checkpoint ``step`` of the policy engine (with the caller's ``client`` state) and any
    ``extra_engines`` (e.g. PPO's critic, under ``<directory>/<name>``). Then rank 0 writes the
    checksum manifest and, last, the ``latest`` marker, so a checkpoint counts only once every byte
    of it is on disk; only the ``keep`` newest of these inputs are kept (see the module docstring
    for other inputs)."""
    directory = Path(directory)
    tag = step_tag(step)
    rank = _rank()
    # Through agree(): an error on rank 0 fails every rank instead of leaving them at a barrier.
    agree(lambda: _prepare_save(directory, fingerprint, step, keep_fingerprints))
    # Frozen weights (a LoRA run's base model, a LoRA critic's trunk) are rebuilt from the inputs, not
    # training state: only the trainable ones and their optimizer state are saved, and loaded back
    # non-strictly (a LoRA critic of SmolLM2 saved 532 MiB of frozen trunk per checkpoint before).
    for name, other in (extra_engines or {}).items():
        other.save_checkpoint(
            str(directory / name), tag=tag, save_latest=False, exclude_frozen_parameters=_has_frozen(other)
        )
    client = {**(client or {}), "fingerprint": fingerprint}
    engine.save_checkpoint(
        str(directory), tag=tag, client_state=client, save_latest=False, exclude_frozen_parameters=_has_frozen(engine)
    )
    # Only tensors, tuples and numbers: readable by torch.load(weights_only=True).
    torch.save(rng.capture(), directory / tag / f"rng_rank{rank}.pt")
    _barrier()
    agree(lambda: _finish_save(directory, fingerprint, step, keep))
    return directory / tag


@dataclass
class Restored:
    """What :func:`load` restored besides the engines: the step, this rank's RNG state (already
    checked, not yet applied) and the caller's ``client`` state of :func:`save`."""

    step: int
    rng: dict
    client: dict


# What a caller finds wrong with its client state of a step (None: nothing): that checkpoint is not resumed.
ClientCheck = Callable[[dict, int], "str | None"]


def load(
    engine,
    directory: str | Path,
    fingerprint: str,
    extra_engines: dict | None = None,
    *,
    keep_fingerprints: int = KEEP_FINGERPRINTS,
    check: ClientCheck | None = None,
) -> tuple[Restored | None, list[str]]:
    """``(the newest intact checkpoint of these inputs, loaded into the engines, or None; the
    newer checkpoints skipped as truncated or corrupted, each with the reason)``. With None,
    training starts over; a checkpoint made from other inputs, or whose client state ``check``
    refuses, is never loaded. Every rank resumes the step rank 0 chose; :class:`CheckpointError`
    when some rank cannot."""
    directory = Path(directory)
    engines = dict(extra_engines or {})
    step, skipped = agree(lambda: _activate_and_choose(directory, fingerprint, list(engines), keep_fingerprints))
    if step is None:
        return None, skipped
    error: Exception | None = None
    try:
        resumed, problem = _load_tag(engine, directory, step, fingerprint, engines, check)
    except Exception as exc:  # raised on one rank alone, it would leave the others waiting in the gather below
        resumed, problem, error = None, f"{type(exc).__name__}: {exc}", exc
    failures = _problems_of_all_ranks(problem)
    if failures:
        detail = "; ".join(f"rank {rank}: {p}" for rank, p in failures)
        raise CheckpointError(
            f"{directory / step_tag(step)} passed its checks but cannot be resumed ({detail}). Move it "
            f"out of {directory} to resume an older checkpoint, or delete {directory} to start "
            "over."
        ) from error
    return resumed, skipped


def _activate_and_choose(
    directory: Path, fingerprint: str, engines: list[str], keep_fingerprints: int
) -> tuple[int | None, list[str]]:
    """Rank 0: make these inputs the active ones, then choose the step to resume."""
    activate(directory, fingerprint, keep_fingerprints)
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


def _load_tag(
    engine, directory: Path, step: int, fingerprint: str, engines: dict, check: ClientCheck | None
) -> tuple[Restored | None, str | None]:
    """Load checkpoint ``step`` into the engines: ``(what was restored, None)`` or ``(None, the problem)``."""
    with weights_only_loads([engine, *engines.values()]):
        return _load_engines(engine, directory, step, fingerprint, engines, check)


def _load_engines(
    engine, directory: Path, step: int, fingerprint: str, engines: dict, check: ClientCheck | None
) -> tuple[Restored | None, str | None]:
    tag = step_tag(step)
    # The frozen weights were not saved: load the rest non-strictly.
    path, client = engine.load_checkpoint(str(directory), tag=tag, load_module_strict=not _has_frozen(engine))
    if path is None:
        return None, f"DeepSpeed could not load {directory / tag}"
    if not isinstance(client, dict) or client.get("fingerprint") != fingerprint:
        return None, "its client state was made from other inputs"
    if check is not None and (problem := check(client, step)):
        return None, problem
    for name, other in engines.items():
        if other.load_checkpoint(str(directory / name), tag=tag, load_module_strict=not _has_frozen(other))[0] is None:
            return None, f"DeepSpeed could not load {directory / name / tag}"
    generators, problem = _read_rng(directory / tag / f"rng_rank{_rank()}.pt")
    if problem:
        return None, problem
    return Restored(step, generators, {k: v for k, v in client.items() if k != "fingerprint"}), None


def _read_rng(path: Path) -> tuple[dict, str | None]:
    """This rank's RNG state, read without unpickling code; ``{}`` when the run had fewer ranks."""
    if not path.is_file():
        return {}, None
    try:
        state = torch.load(path, weights_only=True)
    except Exception as exc:  # the restricted unpickler's refusals and damaged files alike
        return {}, f"{path} is not a plain RNG state ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    problem = rng.problem(state)
    return ({}, f"{path}: {problem}") if problem else (state, None)


def export_model(engine, tokenizer, path: str | Path) -> None:
    """Save the trained policy as a plain Hugging Face checkpoint (gathering ZeRO-3 shards)."""
    from grpoflow.models.engine import import_deepspeed

    deepspeed = import_deepspeed()

    module = engine.module
    rank = _rank()
    with deepspeed.zero.GatheredParameters(list(module.parameters()), enabled=engine.zero_optimization_stage() == 3):
        if rank == 0:
            merged_model(module).save_pretrained(path)  # LoRA: the adapters merged into a plain model
            tokenizer.save_pretrained(path)
