"""Seconds per GRPO step, grpoflow vs TRL's GRPOTrainer, in the same run on the same machine:
the same tiny model, 8 prompts x G=8, 16 completion tokens, beta 0.04, the same math reward.

TRL is a benchmark-only dependency (``pip install '.[bench]'``); without it this benchmark
reports that it was skipped.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys


def _time(impl: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "benchmarks.grpo_step_timing", "--impl", impl, "--steps", str(steps)],
                         capture_output=True, text=True, timeout=1800)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{impl} timing failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))


def run(steps: int = 10) -> dict:
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "trl is not installed (pip install '.[bench]')"}
    ours, trl = _time("ours", steps), _time("trl", steps)
    return {
        "setup": "8 prompts x G=8, 16 completion tokens, beta 0.04, tiny default model, CPU",
        "parameters": ours["parameters"],
        "grpoflow_s_per_step": round(ours["seconds_per_step"], 3),
        "trl_s_per_step": round(trl["seconds_per_step"], 3),
        "grpoflow_over_trl": round(ours["seconds_per_step"] / trl["seconds_per_step"], 3),
    }
