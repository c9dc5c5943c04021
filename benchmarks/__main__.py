"""``make bench``: run every ``benchmarks/bench_*.py`` and write ``metrics/bench.json``, with the
machine they ran on (:func:`machine`).

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
        results[name.removeprefix("bench_")] = importlib.import_module(f"benchmarks.{name}").run()
        print(json.dumps(results[name.removeprefix("bench_")], indent=2), flush=True)
    out = Path(args.out)
    merged = json.loads(out.read_text()) if out.is_file() else {}
    write_json(out, {**merged, **results, "machine": machine()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
