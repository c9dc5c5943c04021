"""Micro-batch size on CPU: one update pass over a whole step's batch (8 prompts x G 8, shared-prefix
packed, forward + backward, fp32, LoRA on a SmolLM2-width Llama), cut into micro-batches of 8, 16,
32 or 64 sequences and accumulated, alternating in the same process, best of a few runs each.

The question it answers: does one large micro-batch (a token budget that fits the whole step) beat
the SmolLM2 set's 4 micro-batches of 16 on this machine? The FLOPs are the same; what differs is
per-call overhead against the working set's fit in cache. Ratios are to 16 sequences.
"""

from __future__ import annotations

import time

from benchmarks.bench_shared_prefix import REPEATS, _batch
from benchmarks.models import smollm2_width_lora

SIZES = (8, 16, 32, 64)


def _pass(model, ids, attn, start: int, size: int) -> float:
    """Seconds of forward + backward over the batch in micro-batches of ``size`` sequences (whole groups)."""
    from grpoflow.rl.logprobs import completion_logprobs

    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    total = attn[:, start:].sum()
    for lo in range(0, ids.shape[0], size):
        part_ids, part_attn = ids[lo : lo + size], attn[lo : lo + size]
        logp, _ = completion_logprobs(model, part_ids, part_attn, start, with_entropy=True, shared_prefix=True)
        ((logp * part_attn[:, start:].float()).sum() / total).backward()
    return time.perf_counter() - t0


def run(layers: int = 4) -> dict:
    """Best-of-``REPEATS`` seconds per micro-batch size, and each size's ratio to 16."""
    model = smollm2_width_lora(layers)
    # the SmolLM2 set's shape: chat prompts of about 60 tokens, completions of up to 96
    ids, attn, start = _batch(8, 8, [52, 58, 64, 70], 96, 49152)
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    for size in SIZES:  # one warm-up each
        _pass(model, ids, attn, start, size)
    for _ in range(REPEATS):
        for size in SIZES:
            times[size].append(_pass(model, ids, attn, start, size))
    best = {size: min(t) for size, t in times.items()}
    setup = f"SmolLM2-width Llama, {layers} layers, LoRA, 8 x G 8, prompt 52-70, completion 48-96, packed"
    return {
        "setup": setup,
        **{f"mb{size}_s": round(best[size], 3) for size in SIZES},
        **{f"mb{size}_over_mb16": round(best[size] / best[16], 3) for size in SIZES},
    }
