"""The torchrun command the launch section generates runs the grpo stage on two processes (gloo on
a CPU) through DVC, as `dvc repro` and the flow run it: no hand edit of dvc.yaml."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from tests.e2e.conftest import SMOKE_OVERRIDES, run, write_params

# Minutes (410-490 s measured on the loaded 2-core machine: DVC runs base_model, prepare and the
# verifier gate first), so off by default: ``pytest -m slow tests/e2e/test_launch.py``.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
PY = sys.executable


def test_the_generated_torchrun_command_trains_the_grpo_stage_on_two_processes(project, run_env):
    rel = write_params(
        project,
        "two",
        {**SMOKE_OVERRIDES, "sft.enabled": False, "rl.steps": 2, "rl.eval_every": 2, "launch.nproc_per_node": 2},
    )
    wrote = run([PY, "-m", "tasks.stages", "--write", "--params", rel], project, run_env)
    assert wrote.returncode == 0, wrote
    command = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]["grpo"]["cmd"]
    assert command.startswith("torchrun --nproc_per_node 2 --nnodes 1 --rdzv_backend c10d --rdzv_endpoint localhost:0 ")
    out = run([PY, "-m", "dvc", "repro", "grpo"], project, run_env)
    assert out.returncode == 0, out
    metrics = json.loads((project / "metrics" / "grpo.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 2
