"""What the loop does when a step runs out of memory: which setting it shrinks next, and the error
when nothing is left to shrink (:meth:`grpoflow.rl.trainer.Trainer.train` retries the step)."""

from __future__ import annotations


class OutOfMemoryAfterBackoff(RuntimeError):
    """Out of memory with every back-off exhausted; the message says what was tried."""


def next_backoff(g: int, max_len: int, micro: int, min_len: int) -> tuple[str, int] | None:
    """The next setting to shrink after an out-of-memory error, as ``(key, new value)``, or None
    when nothing is left. The order is the GRPO spec's troubleshooting row for out-of-memory
    ("lower G first, then max completion length, then batch size"): G multiplies every sequence
    of the batch, so fewer samples per prompt go first (down to 2, the least that still gives a
    group baseline); then shorter completions (down to ``min_len``); the micro-batch last,
    because it changes no result, only the speed."""
    if g > 2:
        return "num_generations", max(2, g // 2)
    if max_len > min_len:
        return "max_completion_length", max(min_len, max_len // 2)
    if micro > 1:
        return "micro_batch_size", micro // 2
    return None
