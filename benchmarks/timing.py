"""Timing helpers for benchmarks: best-of-N wall time, so that a busy core inflates nothing, and
measurements taken in a process of their own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable


def cpu_info() -> dict[str, object]:
    """The CPU the seconds were measured on, and whether it multiplies bf16 natively: an emulated bf16
    run reads several times slower than fp32 (2026-12-07: 14x slower on an AVX2-only CPU than on AMX)."""
    from grpoflow.models.engine import cpu_has_native_bf16
    from grpoflow.numerics import cpu_model

    return {"cpu": cpu_model(), "native_bf16": cpu_has_native_bf16()}


def best_of(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


RESULT = "RESULT "  # the line a benchmark subprocess prints its JSON measurements on


def result_of(args: list[str], timeout: int = 3600) -> dict:
    """Run ``python *args`` in a fresh process (its own threads and memory) and return the JSON of
    its ``RESULT`` line; a run without one is an error carrying the output's tail."""
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    line = next((x for x in out.stdout.splitlines() if x.startswith(RESULT)), None)
    if line is None:
        raise RuntimeError(f"{' '.join(args[:3])} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(line.removeprefix(RESULT))
