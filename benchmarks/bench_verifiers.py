"""Verifier throughput: the plain-number fast path, the math-verify path one answer at a time
(``score``), as a batch on one checker process and spread over 2, each as checks/s (the speed-up
of 2 processes is over the one-process batch);
the verifier gate's own cases (gold forms, perturbed wrong answers, malformed text) as scored by the
gate; and hostile answers (power towers, deep nesting, long sums): how long each takes to decide.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from verifiers.check import validate
from verifiers.math import MathVerifier, score, score_batch

# References of the kinds the gate sees: integers, decimals, fractions, symbolic answers.
GATE_REFERENCES = ["72", "1,000", "-7", "0.5", "2.25", "\\frac{3}{4}", "(x+1)^2", "[1,2)", "\\sqrt{2}", "18"]

# Answers that cost seconds or gigabytes in math-verify without the screen (issue #23, item 5).
HOSTILE = {
    "power_tower": ("\\boxed{10^{10^{10^{10}}}}", "(x+1)^2"),
    "nested_parens_140": ("\\boxed{" + "(" * 140 + "1" + ")" * 140 + "}", "2"),
    "polynomial_60_terms": ("\\boxed{" + "+".join(f"{i}x" for i in range(1, 61)) + "}", "(x+1)^2"),
}


def _rate(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def _gate_rate(copies: int = 20, workers: int = 2) -> dict:
    """Cases/s of the gate's own scoring (``validate`` over :meth:`MathVerifier.gate_cases`)."""
    rows = [{"id": f"r{i}", "reference_answer": ref} for i in range(copies) for ref in GATE_REFERENCES]
    verifier = MathVerifier(workers=workers)
    cases = verifier.gate_cases(rows)
    result = validate(verifier.score, cases, accepts=verifier.accepts)
    return {
        "gate_cases": len(cases),
        "gate_cases_per_s": round(result.checks_per_second),
        "gate_accuracy": round(result.accuracy, 4),
    }


def _hostile_seconds() -> dict:
    """Wall seconds to decide each hostile answer (after a warm-up outside the timing)."""
    score("\\boxed{\\frac{1}{2}}", "0.5")
    found = {}
    for name, (completion, reference) in HOSTILE.items():
        start = time.perf_counter()
        verdict = score(completion, reference)
        found[f"hostile_{name}_s"] = round(time.perf_counter() - start, 3)
        found[f"hostile_{name}_score"] = verdict
    return found


def _latex(n: int, offset: int) -> tuple[list[str], list[str]]:
    """``n`` fraction answers not seen before (math-verify caches what it parsed)."""
    ids = range(offset, offset + n)
    return [f"so \\boxed{{\\frac{{{i}}}{{{i + 1}}}}}" for i in ids], [f"{i}/{i + 1}" if i % 2 else "0.5" for i in ids]


def run(n: int = 4000) -> dict:
    plain = ([f"Work...\n#### {i:,}" for i in range(n)], [str(i if i % 2 else i + 1) for i in range(n)])
    score_batch(*_latex(128, 10 * n), workers=2)  # start the checker processes outside the timing
    fast = _rate(lambda: score_batch(*plain, workers=1), n)
    slow_serial = _rate(lambda: [score(c, r) for c, r in zip(*_latex(n, 0))], n)
    slow_batch = _rate(lambda: score_batch(*_latex(n, n), workers=1), n)
    slow_parallel = _rate(lambda: score_batch(*_latex(n, 2 * n), workers=2), n)
    return {
        "checks": n,
        "plain_checks_per_s": round(fast),
        "math_verify_1proc_checks_per_s": round(slow_serial),
        "math_verify_batch_1proc_checks_per_s": round(slow_batch),
        "math_verify_2proc_checks_per_s": round(slow_parallel),
        "plain_over_math_verify": round(fast / slow_serial, 1),
        "parallel_speedup_2proc": round(slow_parallel / slow_batch, 2),
        **_gate_rate(),
        **_hostile_seconds(),
    }
