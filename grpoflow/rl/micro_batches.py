"""The micro-batches of one update: at most ``rl.engine.micro_batch_size`` sequences each and, under
a token budget (``rl.engine.max_tokens_per_micro_batch``), at most that many computed token
positions, so that a batch of short completions takes few passes and one of long completions
cannot exceed the memory a budget was sized for.

A micro-batch's cost is the positions its pass computes (:mod:`grpoflow.rl.shared_prefix`): packed,
one row per group, each ``P + sum of its completions' fed tokens`` and all as wide as the widest;
unpacked, one ``P + C`` row per sequence. Micro-batches are consecutive rows, so a group stays
whole unless it alone exceeds the budget.

Each micro-batch's loss is a mean over its own rows (or tokens); :func:`loss_scales` weighs it by
its share of the step's rows (or tokens) on every process, so that micro-batches of unequal size,
and processes of unequal token counts, still sum to the step's objective under DeepSpeed's gradient
accumulation and averaging, which divide every loss by its step count and its process count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from grpoflow.rl import shared_prefix as sp


def plan(
    ids: torch.Tensor,
    attn: torch.Tensor,
    start: int,
    max_rows: int,
    max_tokens: int | None,
    packed: bool,
    rows: sp.Rows | None = None,
) -> list[slice]:
    """Consecutive slices of the batch's rows, each at most ``max_rows`` long and, when
    ``max_tokens`` is set, at most ``max_tokens`` computed positions (or one row alone). ``rows``:
    the batch's layout rows, when read already (else they are read here, once)."""
    n = len(ids)
    if max_tokens is None:
        return [slice(i, min(i + max_rows, n)) for i in range(0, n, max_rows)]
    found = sp.layout(ids, attn, start, rows)
    group, fed = found.group_of_row, found.fed_per_row
    slices, lo = [], 0
    while lo < n:
        hi = _extend(group, fed, lo, start, ids.shape[1], max_rows, max_tokens, packed)
        slices.append(slice(lo, hi))
        lo = hi
    return slices


def _extend(
    group: list[int], fed: list[int], lo: int, p: int, width: int, max_rows: int, max_tokens: int, packed: bool
) -> int:
    """The end of the micro-batch starting at row ``lo``: rows are added while the cost stays
    within ``max_tokens`` (the first one always)."""
    hi, groups, run, widest = lo, 0, 0, 0
    while hi < len(group) and hi - lo < max_rows:
        new_group = hi == lo or group[hi] != group[hi - 1]
        k, r = groups + new_group, (0 if new_group else run) + fed[hi]
        rows = hi - lo + 1
        shares = packed and k < rows  # two rows share a prompt: the packed path runs
        cost = k * (p + max(widest, r)) if shares else rows * width
        if hi > lo and cost > max_tokens:
            break
        groups, run, widest, hi = k, r, max(widest, r), hi + 1
    return hi


def cost(ids: torch.Tensor, attn: torch.Tensor, start: int, packed: bool) -> int:
    """Computed positions of one pass over these rows (:func:`plan`'s cost of one micro-batch)."""
    found = sp.layout(ids, attn, start)
    if not packed or not found.shared:
        return ids.numel()
    return sp.pack(ids, attn, start, found).input_ids.numel()


def loss_scales(
    slices: list[slice],
    accumulation_steps: int,
    *,
    sizes: Sequence[float] | None = None,
    total: float | None = None,
    world: int = 1,
) -> list[float]:
    """Factor of each micro-batch's loss, a mean over its ``sizes[i]`` rows or tokens (default: its
    rows): its share of the step's ``total`` over every process (default: the sum of ``sizes``), times
    what DeepSpeed divides by: the accumulation steps, and the ``world`` processes whose gradients it
    averages. Equal micro-batches of ``rows / accumulation_steps`` on one process get 1.0 each."""
    sizes = [s.stop - s.start for s in slices] if sizes is None else list(sizes)
    total = sum(sizes) if total is None else total
    # A mean over the whole step's rows (tokens) on every process, not one per micro-batch or rank.
    return [n * accumulation_steps * world / total for n in sizes]


def accumulation(slices: list[slice], *engines) -> Iterator[slice]:
    """The micro-batches of one optimizer step. The last is marked as the accumulation boundary on
    every engine, so a step never depends on DeepSpeed's running micro-step count, which G
    schedules, OOM back-off and token budgets would otherwise put out of phase."""
    for i, sl in enumerate(slices):
        for engine in engines:
            engine.set_gradient_accumulation_boundary(i == len(slices) - 1)
        yield sl
