"""Reproducible digits: the sft and evaluate stages, run twice in two processes with other thread counts and
hash seeds, give the same weights and the same scores, and record the kernels they ran on
(grpoflow/numerics.py: two fresh clones differed because their CPUs' kernels did, not their load)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable
SMALL = {
    "data": {"synthetic": {"num_examples": 400}},
    "sft": {"epochs": 0.5, "eval_examples": 16},
    "evaluate": {"max_examples": 24, "n_samples": 2, "k": 2},
}


def _small_set(project: Path) -> str:
    raw = yaml.safe_load((project / "params" / "default.yaml").read_text())
    for section, values in SMALL.items():
        for key, value in values.items():
            target = raw.setdefault(section, {})
            if isinstance(value, dict):
                target.setdefault(key, {}).update(value)
            else:
                target[key] = value
    (project / "params" / "repro.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return "params/repro.yaml"


def _stages(project: Path, env: dict[str, str], params: str, tag: str) -> dict:
    """prepare, base_model, sft and evaluate into outputs of their own; the weights' hash and the scores."""
    out = {k: f"{k}-{tag}" for k in ("data", "base", "sft", "eval", "metrics")}
    commands = [
        ["tasks.prepare", "--out", out["data"], "--metrics", f"{out['metrics']}/prepare.json"],
        ["tasks.base_model", "--out", out["base"], "--metrics", f"{out['metrics']}/base_model.json"],
        [
            "tasks.sft",
            "--data",
            out["data"],
            "--base",
            out["base"],
            "--out",
            out["sft"],
            "--metrics",
            f"{out['metrics']}/sft.json",
        ],
        [
            "tasks.evaluate",
            "--data",
            out["data"],
            "--models",
            f"sft={out['sft']}",
            "--out",
            out["eval"],
            "--metrics",
            f"{out['metrics']}/evaluate.json",
        ],
    ]
    for module, *args in commands:
        ran = run([PY, "-m", module, "--params", params, *args], project, env)
        assert ran.returncode == 0, ran
    weights = sorted((project / out["sft"]).glob("*.safetensors"))
    assert weights
    digest = hashlib.sha256(b"".join(w.read_bytes() for w in weights)).hexdigest()
    evaluation = json.loads((project / out["metrics"] / "evaluate.json").read_text())
    sft = json.loads((project / out["metrics"] / "sft.json").read_text())
    return {"weights": digest, "val_accuracy": sft["val_accuracy"], "test": evaluation["models"]["sft"]["test"]}


def test_two_processes_with_other_threads_and_hash_seeds_train_and_score_alike(project, run_env):
    params = _small_set(project)
    first = _stages(project, {**run_env, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "1"}, params, "a")
    # The second as a narrower CPU would run it (#51): MKL told the CPU has no AVX-512, oneDNN no AVX.
    narrower = {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
    second = _stages(project, {**run_env, "OMP_NUM_THREADS": "2", "PYTHONHASHSEED": "2", **narrower}, params, "b")
    assert first == second
    assert first["test"]["pass@1"] is not None and "greedy" in first["test"], first["test"]


def test_a_stage_runs_on_the_kernels_its_set_names_and_records_them(project, run_env):
    code = (
        "import sys\n"
        "from tasks import cli\n"
        "from grpoflow.config import load_params\n"
        "from grpoflow.numerics import pin_cpu_kernels, fingerprint\n"
        "pin_cpu_kernels(load_params(sys.argv[1]).experiment.cpu_kernels)\n"
        "print(fingerprint()['cpu_capability'])\n"
    )
    env = {k: v for k, v in run_env.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    if os.uname().machine != "x86_64":
        pytest.skip("the avx2 kernels are x86-64's")
    ran = run([PY, "-c", code, "params/default.yaml"], project, env)
    assert ran.returncode == 0 and ran.stdout.strip() == "AVX2", ran
    ran = run([PY, "-c", code, "params/smollm2-135m.yaml"], project, env)  # native: the widest this CPU has
    assert ran.returncode == 0 and ran.stdout.strip() not in ("", "DEFAULT"), ran
