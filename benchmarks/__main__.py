"""``make bench``: run every ``benchmarks/bench_*.py`` and write ``metrics/bench.json``, each
benchmark's results with the machine they ran on (:func:`machine`).

Each module has ``run() -> dict`` returning its measurements; absolute seconds are recorded for
orientation, the claims are the ratios against the reference measured beside them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import benchmarks
from benchmarks.timing import cpu_info
from grpoflow.io import write_json


def machine() -> dict[str, object]:
    """What the seconds were measured on: torch's fingerprint (the CPU, its kernels, threads, version)
    and whether bf16 is native there (:func:`benchmarks.timing.cpu_info`)."""
    from grpoflow.numerics import fingerprint

    return {**fingerprint(), **cpu_info()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("names", nargs="*", help="only these benchmarks (module names without bench_)")
    parser.add_argument("--out", default="metrics/bench.json")
    args = parser.parse_args(argv)
    found = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    chosen = [m for m in found if not args.names or m.removeprefix("bench_") in args.names]
    results = {}
    for name in chosen:
        print(f"== {name}", flush=True)
        key = name.removeprefix("bench_")
        results[key] = importlib.import_module(f"benchmarks.{name}").run()
        print(json.dumps(results[key], indent=2), flush=True)
    write_results(Path(args.out), results)
    return 0


def write_results(out: Path, results: dict[str, dict]) -> None:
    """Merge ``results`` (benchmark name -> its measurements) into ``out``, each with this machine
    (:func:`machine`): a run of some benchmarks keeps the others' results, and the machine they
    were measured on, from earlier runs."""
    record = machine()
    merged = json.loads(out.read_text()) if out.is_file() else {}
    # Files written before each benchmark carried its own had one record for all, the last run's:
    # it named that machine for results measured on others too, so it is dropped, not guessed at.
    merged.pop("machine", None)
    write_json(out, {**merged, **{name: {**measured, "machine": record} for name, measured in results.items()}})


if __name__ == "__main__":
    sys.exit(main())
