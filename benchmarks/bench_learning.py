"""Does GRPO measurably improve the model? The default pipeline (prepare -> validate_verifiers
-> sft -> grpo) by ``dvc repro`` in a scratch copy of this checkout; the SFT reference's val
accuracy is the reference, GRPO's the result, both measured in this run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpoflow.provenance import copy_checkout

ROOT = Path(__file__).resolve().parents[1]


def run() -> dict:
    work = copy_checkout(ROOT, Path(tempfile.mkdtemp(prefix="grpoflow-bench-")) / "project")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "grpo"], cwd=work, env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(out.stdout[-3000:] + out.stderr[-3000:])
    sft = json.loads((work / "metrics" / "sft.json").read_text())
    grpo = json.loads((work / "metrics" / "grpo.json").read_text())
    return {
        "sft_val_accuracy": sft["val_accuracy"],
        "grpo_val_accuracy": grpo["val_accuracy"],
        "gain_points": round(100 * (grpo["val_accuracy"] - sft["val_accuracy"]), 1),
        "grpo_s_per_step": round(grpo["seconds_per_step"], 3),
        "grpo_peak_memory_mb": round(grpo["peak_memory_mb"]),
        "pipeline_seconds": round(time.perf_counter() - start, 1),
    }
