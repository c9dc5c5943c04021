"""The RL loop's own state, and how the loop saves and resumes it beside its engines.

A checkpoint (:mod:`grpoflow.models.checkpoint`, which knows nothing of RL) carries the loop's step,
its KL coefficient as adaptive control left it and the out-of-memory back-off's caps as client state
``{"loop": {...}, **extra}``: the same files as before this module existed, so older checkpoints resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grpoflow.models import checkpoint


@dataclass
class LoopState:
    """Everything besides the engine that a resumed run needs to continue exactly."""

    step: int = 0
    beta: float = 0.0  # the algorithm's KL coefficient (its catalog entry's kl_key), moved by adaptive KL control
    rng: dict = field(default_factory=dict)
    # Caps set by out-of-memory back-off: num_generations, max_completion_length, micro_batch_size.
    backoff: dict = field(default_factory=dict)

    def capped(self, key: str, configured: int) -> int:
        """``configured`` (num_generations, max_completion_length or micro_batch_size), capped by any
        out-of-memory back-off of ``key``."""
        return min(configured, self.backoff.get(key, configured))


@dataclass
class Resumed:
    """What :func:`load` restored: the loop state and the caller's ``extra`` of :func:`save`."""

    state: LoopState
    extra: dict


def save(
    engine,
    directory: str | Path,
    state: LoopState,
    fingerprint: str,
    *,
    extra_engines: dict | None = None,
    extra: dict | None = None,
    keep: int = 2,
    keep_fingerprints: int = checkpoint.KEEP_FINGERPRINTS,
) -> Path:
    """A checkpoint of the engines at ``state.step`` with the loop's state and the caller's ``extra``
    (:func:`grpoflow.models.checkpoint.save` says how it is made safe)."""
    loop = {"step": state.step, "beta": state.beta, "backoff": state.backoff}
    return checkpoint.save(
        engine,
        directory,
        state.step,
        fingerprint,
        client={"loop": loop, **(extra or {})},
        extra_engines=extra_engines,
        keep=keep,
        keep_fingerprints=keep_fingerprints,
    )


def _loop_problem(client: dict, step: int) -> str | None:
    """Why ``client`` holds no loop state of ``step`` (None: it does)."""
    loop = client.get("loop")
    if not isinstance(loop, dict) or loop.get("step") != step or not isinstance(loop.get("beta"), (int, float)):
        return f"its client state has no valid 'loop' for step {step}"
    return None


def load(
    engine,
    directory: str | Path,
    fingerprint: str,
    extra_engines: dict | None = None,
    *,
    keep_fingerprints: int = checkpoint.KEEP_FINGERPRINTS,
) -> tuple[Resumed | None, list[str]]:
    """The newest intact checkpoint of these inputs loaded into the engines, with the loop's state
    (None: start over), and the newer checkpoints skipped (:func:`grpoflow.models.checkpoint.load`)."""
    restored, skipped = checkpoint.load(
        engine, directory, fingerprint, extra_engines, keep_fingerprints=keep_fingerprints, check=_loop_problem
    )
    if restored is None:
        return None, skipped
    loop = restored.client["loop"]
    backoff = loop.get("backoff") if isinstance(loop.get("backoff"), dict) else {}
    state = LoopState(step=restored.step, beta=float(loop["beta"]), rng=restored.rng, backoff=backoff)
    return Resumed(state, {k: v for k, v in restored.client.items() if k != "loop"}), skipped
