"""Sandboxed code checks per second: one at a time (``run_tests`` in a loop, the reference) and as a batch
(``run_batch``, ``workers`` sandboxes at a time, each set up while the previous one runs), the ratio between
them, and the median time of each phase of one check on the sequential path.

Every check is fully isolated either way (fresh namespaces, nobody, rlimits, private tmpfs, wall limit).
"""

from __future__ import annotations

import statistics
import time

from verifiers.sandbox import Limits, Result, run_batch, run_tests

# A short MBPP-style program: one function, three asserts.
CODE = "def add(a, b):\n    return a + b"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


def _timed(fn) -> tuple[float, list[Result]]:
    start = time.perf_counter()
    results = fn()
    return time.perf_counter() - start, results


def _all_passed(results: list[Result]) -> None:
    failed = [r for r in results if r.passed != [True] * len(TESTS)]
    if failed:  # a broken sandbox must not report a throughput
        raise RuntimeError(f"{len(failed)} checks failed, e.g. {failed[0]}")


def run(n: int = 300, workers: int | None = None) -> dict:
    limits = Limits()
    workers = workers or limits.workers
    run_tests(CODE, TESTS, limits)  # the fork server starts outside the timings
    items = [(CODE, TESTS)] * n
    sequential_s, sequential = _timed(lambda: [run_tests(c, t, limits) for c, t in items])
    batch_s, batch = _timed(lambda: run_batch(items, limits, workers=workers))
    wide_s, wide = _timed(lambda: run_batch(items, limits, workers=2 * workers))
    for results in (sequential, batch, wide):
        _all_passed(results)
    phases = {k: round(statistics.median(r.timings[k] for r in sequential), 2) for k in sequential[0].timings}
    return {
        "checks": n,
        "workers": workers,
        "sequential_checks_per_s": round(n / sequential_s, 1),
        "batch_checks_per_s": round(n / batch_s, 1),
        "batch_speedup": round(sequential_s / batch_s, 2),
        f"batch_{2 * workers}_workers_checks_per_s": round(n / wide_s, 1),
        f"batch_{2 * workers}_workers_speedup": round(sequential_s / wide_s, 2),
        "sequential_phase_median_ms": phases,
        "batch_latency_median_ms": round(statistics.median(r.timings["latency"] for r in batch), 2),
    }
