"""Timing helpers for benchmarks: best-of-N wall time, so that a busy core inflates nothing, and
measurements taken in a process of their own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable


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
