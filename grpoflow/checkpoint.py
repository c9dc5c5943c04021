"""Resumable checkpoints: DeepSpeed's (model, optimizer, scheduler) plus the loop's own state
(step, adaptive beta, RNG of every process, health history) and a fingerprint of the inputs, so
that a checkpoint of a different configuration is never resumed by mistake."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
import torch.distributed as dist

from grpoflow.rl import LoopState


def _tag(step: int) -> str:
    return f"step_{step:06d}"


def save(engine, directory: str | Path, state: LoopState, fingerprint: str, *,
         extra_engines: dict | None = None, extra: dict | None = None) -> Path:
    """Save the policy engine (with the loop state) and any ``extra_engines`` (e.g. PPO's critic,
    under ``<directory>/<name>``); the policy's ``latest`` marker is written last."""
    directory = Path(directory)
    tag = _tag(state.step)
    for name, other in (extra_engines or {}).items():
        other.save_checkpoint(str(directory / name), tag=tag)
    client = {"loop": {"step": state.step, "beta": state.beta}, "fingerprint": fingerprint, **(extra or {})}
    engine.save_checkpoint(str(directory), tag=tag, client_state=client)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0:
        # Read before any weights are loaded: a checkpoint of other inputs must not touch the engine.
        (directory / tag / "fingerprint.json").write_text(json.dumps({"fingerprint": fingerprint, "step": state.step}))
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, directory / tag / f"rng_rank{rank}.pt")
    return directory / tag


def latest_step(directory: str | Path) -> int | None:
    marker = Path(directory) / "latest"
    if not marker.is_file():
        return None
    tag = marker.read_text().strip()
    return int(tag.removeprefix("step_")) if tag.startswith("step_") else None


def load(engine, directory: str | Path, fingerprint: str, extra_engines: dict | None = None) -> tuple[LoopState, dict] | None:
    """The loop state and extra client state of the latest checkpoint, or None when there is none
    or it belongs to other inputs (then training starts over)."""
    step = latest_step(directory)
    if step is None:
        return None
    meta = Path(directory) / _tag(step) / "fingerprint.json"
    if not meta.is_file() or json.loads(meta.read_text()).get("fingerprint") != fingerprint:
        return None  # made from other params, data, reference or code: start over, weights untouched
    path, client = engine.load_checkpoint(str(directory), tag=_tag(step))
    if path is None or client.get("fingerprint") != fingerprint:
        return None
    for name, other in (extra_engines or {}).items():
        if other.load_checkpoint(str(Path(directory) / name), tag=_tag(step))[0] is None:
            return None
    rank = dist.get_rank() if dist.is_initialized() else 0
    rng_file = Path(directory) / _tag(step) / f"rng_rank{rank}.pt"
    rng = torch.load(rng_file, weights_only=False) if rng_file.is_file() else {}
    loop = client["loop"]
    extra = {k: v for k, v in client.items() if k not in ("loop", "fingerprint")}
    return LoopState(step=loop["step"], beta=loop["beta"], rng=rng), extra


def export_model(engine, tokenizer, path: str | Path) -> None:
    """Save the trained policy as a plain Hugging Face checkpoint (gathering ZeRO-3 shards)."""
    import deepspeed

    module = engine.module
    rank = dist.get_rank() if dist.is_initialized() else 0
    with deepspeed.zero.GatheredParameters(list(module.parameters()), enabled=engine.zero_optimization_stage() == 3):
        if rank == 0:
            module.save_pretrained(path)
            tokenizer.save_pretrained(path)
