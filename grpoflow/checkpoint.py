"""Resumable checkpoints: DeepSpeed's (model, optimizer, scheduler) plus the loop's own state
(step, adaptive beta, RNG of every process, health history) and a fingerprint of the inputs, so
that a checkpoint of a different configuration is never resumed by mistake. A sha256 manifest
written after every file makes a truncated or corrupted checkpoint detectable: loading falls
back to the newest intact one."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from grpoflow.io import atomic_write, sha256_file, write_json
from grpoflow.rl import LoopState

MANIFEST = "manifest.json"


def _tag(step: int) -> str:
    return f"step_{step:06d}"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _files_of(directory: Path, tag: str, engines: list[str]) -> list[Path]:
    """Every file of checkpoint ``tag``: the policy's tag dir and each extra engine's."""
    dirs = [directory / tag] + [directory / name / tag for name in engines]
    return sorted(p for d in dirs if d.is_dir() for p in d.rglob("*") if p.is_file() and p.name != MANIFEST)


def verify(directory: str | Path, step: int) -> str | None:
    """None when checkpoint ``step`` is complete and intact, else what is wrong with it."""
    directory = Path(directory)
    manifest = directory / _tag(step) / MANIFEST
    if not manifest.is_file():
        return "no manifest (the save was interrupted)"
    try:
        listed = json.loads(manifest.read_text())
    except json.JSONDecodeError:
        return f"{manifest} is not valid JSON"
    for rel, digest in listed["files"].items():
        if not (directory / rel).is_file():
            return f"{rel} is missing"
        if sha256_file(directory / rel) != digest:
            return f"{rel} does not match its checksum"
    return None


def save(engine, directory: str | Path, state: LoopState, fingerprint: str, *,
         extra_engines: dict | None = None, extra: dict | None = None, keep: int = 2) -> Path:
    """Save the policy engine (with the loop state) and any ``extra_engines`` (e.g. PPO's critic,
    under ``<directory>/<name>``). Then rank 0 writes the checksum manifest and, last, the
    ``latest`` marker, so a checkpoint counts only once every byte of it is on disk; only the
    ``keep`` newest are kept."""
    directory = Path(directory)
    tag = _tag(state.step)
    for name, other in (extra_engines or {}).items():
        other.save_checkpoint(str(directory / name), tag=tag, save_latest=False)
    client = {"loop": {"step": state.step, "beta": state.beta, "backoff": state.backoff},
              "fingerprint": fingerprint, **(extra or {})}
    engine.save_checkpoint(str(directory), tag=tag, client_state=client, save_latest=False)
    rank = _rank()
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, directory / tag / f"rng_rank{rank}.pt")
    _barrier()
    if rank == 0:
        # Read before any weights are loaded: a checkpoint of other inputs must not touch the engine.
        (directory / tag / "fingerprint.json").write_text(json.dumps({"fingerprint": fingerprint, "step": state.step}))
        files = {str(p.relative_to(directory)): sha256_file(p) for p in _files_of(directory, tag, list(extra_engines or {}))}
        write_json(directory / tag / MANIFEST, {"step": state.step, "files": files})
        with atomic_write(directory / "latest") as fh:
            fh.write(tag)
        _prune(directory, keep, list(extra_engines or {}))
    _barrier()
    return directory / tag


def _prune(directory: Path, keep: int, engines: list[str]) -> None:
    for step in saved_steps(directory)[keep:]:
        for d in [directory / _tag(step)] + [directory / name / _tag(step) for name in engines]:
            shutil.rmtree(d, ignore_errors=True)


def saved_steps(directory: str | Path) -> list[int]:
    """Steps of the checkpoints in ``directory``, newest first (complete or not)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((int(p.name.removeprefix("step_")) for p in directory.glob("step_*") if p.name[5:].isdigit()), reverse=True)


def latest_step(directory: str | Path) -> int | None:
    marker = Path(directory) / "latest"
    if not marker.is_file():
        return None
    tag = marker.read_text().strip()
    return int(tag.removeprefix("step_")) if tag.startswith("step_") else None


@dataclass
class Resumed:
    state: LoopState
    extra: dict


def load(engine, directory: str | Path, fingerprint: str, extra_engines: dict | None = None) -> tuple[Resumed | None, list[str]]:
    """``(the newest intact checkpoint of these inputs, loaded into the engines, or None; the
    newer checkpoints skipped as truncated or corrupted, each with the reason)``. With None,
    training starts over; a checkpoint made from other inputs is never loaded."""
    directory = Path(directory)
    skipped: list[str] = []
    for step in saved_steps(directory):
        problem = verify(directory, step)
        if problem:
            skipped.append(f"{_tag(step)}: {problem}")
            continue
        meta = json.loads((directory / _tag(step) / "fingerprint.json").read_text())
        if meta.get("fingerprint") != fingerprint:
            return None, skipped  # made from other params, data, reference or code: weights untouched
        return _load_tag(engine, directory, step, fingerprint, extra_engines or {}), skipped
    return None, skipped


def _load_tag(engine, directory: Path, step: int, fingerprint: str, extra_engines: dict) -> Resumed | None:
    path, client = engine.load_checkpoint(str(directory), tag=_tag(step))
    if path is None or client.get("fingerprint") != fingerprint:
        return None
    for name, other in extra_engines.items():
        if other.load_checkpoint(str(directory / name), tag=_tag(step))[0] is None:
            return None
    rng_file = directory / _tag(step) / f"rng_rank{_rank()}.pt"
    rng = torch.load(rng_file, weights_only=False) if rng_file.is_file() else {}
    loop = client["loop"]
    extra = {k: v for k, v in client.items() if k not in ("loop", "fingerprint")}
    state = LoopState(step=loop["step"], beta=loop["beta"], rng=rng, backoff=loop.get("backoff", {}))
    return Resumed(state, extra)


def export_model(engine, tokenizer, path: str | Path) -> None:
    """Save the trained policy as a plain Hugging Face checkpoint (gathering ZeRO-3 shards)."""
    import deepspeed

    module = engine.module
    rank = _rank()
    with deepspeed.zero.GatheredParameters(list(module.parameters()), enabled=engine.zero_optimization_stage() == 3):
        if rank == 0:
            module.save_pretrained(path)
            tokenizer.save_pretrained(path)
