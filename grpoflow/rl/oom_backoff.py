"""What the loop does when a step runs out of memory: which setting it shrinks next, and the error
when nothing is left to shrink (:meth:`grpoflow.rl.trainer.Trainer.train` retries the step)."""

from __future__ import annotations


class OutOfMemoryAfterBackoff(RuntimeError):
    """Out of memory with every back-off exhausted; the message says what was tried."""


class OutOfMemoryInDistributedUpdate(RuntimeError):
    """Out of memory in the update of one process among several: not backed off, because the others
    are already waiting in the update's collectives (gradient reduction; ZeRO-3's parameter gathers
    in the forward pass) for a process that would retry the step instead, until the collective's
    timeout. The process stops, and the launcher (torchrun) stops the rest; the message names the
    setting a back-off would have changed. Rollouts hold no collective: there every process agrees
    and backs off together."""


def distributed_update_oom(step: int, rank: int, world: int, settings: dict[str, int], min_len: int) -> str:
    """The message of :class:`OutOfMemoryInDistributedUpdate` at ``step`` (0-based) on process ``rank``:
    the setting the back-off would change next (``settings``: G, completion length, micro-batch now)."""
    change = next_backoff(
        settings["num_generations"], settings["max_completion_length"], settings["micro_batch_size"], min_len
    )
    remedy = (
        f"set {_KEYS[change[0]]}: {change[1]} (now {settings[change[0]]}) and resume from the last checkpoint"
        if change is not None
        else "use a smaller model or more GPUs (a higher ZeRO stage), or lower rl.prompts_per_step"
    )
    return (
        f"out of memory in the update at step {step + 1} on process {rank} of {world}; the back-off is not "
        f"taken where processes are waiting on each other mid-update (it would stall them): {remedy}"
    )


_KEYS = {
    "num_generations": "rl.num_generations",
    "max_completion_length": "rl.sampling.max_completion_length",
    "micro_batch_size": "rl.engine.micro_batch_size",
}


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
