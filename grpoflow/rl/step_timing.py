"""What a training step measures of itself: the wall seconds of its phases and the peak memory."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from grpoflow import metric_names as M


def peak_memory_mb() -> float:
    """Peak memory of this process so far: CUDA allocations on a GPU, else the process's max RSS."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


class PhaseTimer:
    """Wall seconds per named phase of a step, exclusive: a phase timed inside another (the
    reference log-probs inside the update) is subtracted from the outer one, so the phases never
    count a second twice and, with "other", sum to the step's wall time.

    On CUDA each phase ends with a synchronize, else it would measure kernel launches, not work.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []  # per open phase: seconds its nested phases took

    def reset(self) -> None:
        """Forget every phase: a new step starts (its parts hold this timer, so it is not replaced)."""
        self.seconds.clear()
        self._inner.clear()

    @contextmanager
    def phase(self, key: str) -> Iterator[None]:
        """Time the block as phase ``key`` (accumulated when a step runs it more than once)."""
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            spent = time.perf_counter() - start
            nested = self._inner.pop()
            self.seconds[key] = self.seconds.get(key, 0.0) + spent - nested
            if self._inner:
                self._inner[-1] += spent

    def split(self, wall: float) -> dict[str, float]:
        """Every phase's seconds (0 for one that did not run), and "other": ``wall`` minus them."""
        out = {key: self.seconds.get(key, 0.0) for key in M.TIMED_PHASES}
        out[M.PHASE_OTHER] = max(0.0, wall - sum(out.values()))
        out[M.PHASE_WALL] = wall
        return out
