"""Verifier throughput: the plain-number fast path, the math-verify path on one core, and the
math-verify path spread over 2 processes, each as checks/s and as a ratio to the one-core path.
"""

from __future__ import annotations

import time

from verifiers.math import score, score_batch


def _rate(fn, n: int) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def run(n: int = 4000) -> dict:
    plain = ([f"Work...\n#### {i:,}" for i in range(n)], [str(i if i % 2 else i + 1) for i in range(n)])
    latex = ([f"so \\boxed{{\\frac{{{i}}}{{{i + 1}}}}}" for i in range(n)], [f"{i}/{i + 1}" if i % 2 else "0.5" for i in range(n)])
    fast = _rate(lambda: score_batch(*plain, workers=1), n)
    slow_serial = _rate(lambda: [score(c, r) for c, r in zip(*latex)], n)
    slow_parallel = _rate(lambda: score_batch(*latex, workers=2), n)
    return {
        "checks": n,
        "plain_checks_per_s": round(fast),
        "math_verify_1proc_checks_per_s": round(slow_serial),
        "math_verify_2proc_checks_per_s": round(slow_parallel),
        "plain_over_math_verify": round(fast / slow_serial, 1),
        "parallel_speedup_2proc": round(slow_parallel / slow_serial, 2),
    }
