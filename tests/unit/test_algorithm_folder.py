"""#52: a new algorithm with settings of its own is one folder (tests/unit/toy_algorithm/), joined
through ``GRPOFLOW_ALGORITHMS``, and nothing else changes: its params section, its rule, its tune
space, its smoke size, its arm, the GPU stages and the default run all follow from its spec, and it
trains one step on the shared loop with a reference for its KL penalty.

The catalog is read once per process (the schema is built from it), so the checks run in a fresh
process with the variable set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpoflow import catalog

REPO = Path(__file__).resolve().parents[2]
FOLDER = Path(__file__).parent / "toy_algorithm"
NAME = "reinforce_kl"
DISTRIBUTED_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")

CHECKS = r"""
import json, sys, tempfile
from pathlib import Path

import torch

from grpoflow import catalog
from grpoflow.config import set_dotted, validate_params
from grpoflow.config.orchestration import builtin_arms
from grpoflow.rl.algorithm import ALGORITHMS
from grpoflow.rl.run import build_rl_run
from flows.rehearse import SMOKE
from tasks.stages import BY_NAME
from tests.unit import rl_workspace

out = {"names": catalog.names(), "default_run": catalog.default_run(), "arm": "reinforce_kl" in builtin_arms()}
params = validate_params({"reinforce_kl": {"kl_coef": 0.1}})
out["section"] = params.reinforce_kl.model_dump()
out["space"] = {k: d.model_dump(exclude_none=True) for k, d in params.tune.space("reinforce_kl").items()}
out["gpu_stages"] = params.orchestration.gpu_stages
out["stages"] = sorted(BY_NAME)
out["compare_deps"] = [d for d in BY_NAME["compare"].paths("dep") if "reinforce_kl" in d]
for name, raw in {
    "typo": {"reinforce_kl": {"kl_cof": 0.1}},
    "rule": {"reinforce_kl": {"baseline": "none", "kl_coef": 0}, "ablation": {"arms": ["grpo", "reinforce_kl"]}},
}.items():
    try:
        validate_params(raw)
        out[name] = None
    except Exception as exc:
        out[name] = str(exc)
raw = {}
for key, value in SMOKE.items():
    set_dotted(raw, key, value)
smoke = validate_params(raw)
out["smoke"] = [smoke.reinforce_kl.baseline, smoke.tune.reinforce_kl.kl_coef.high]

workspace = rl_workspace.build(Path(tempfile.mkdtemp()))
tiny = {"rl": {"steps": 1, "prompts_per_step": 4, "num_generations": 2, "sampling": {"max_completion_length": 4},
               "engine": {"micro_batch_size": 4, "lr": 0.01}}, "reinforce_kl": {"kl_coef": 0.1}}
run = build_rl_run(validate_params(tiny), ALGORITHMS["reinforce_kl"], data_dir=workspace / "data",
                   reference_dir=workspace / "ref")
run.trainer.batches.reward = lambda completions, rows: (torch.arange(len(completions)) % 2 * 1.0, {})
before = {n: p.detach().clone() for n, p in run.engine.module.named_parameters()}
metrics = run.trainer.step(0)
out["reference"] = run.reference is not None
out["moved"] = any(not torch.equal(p, before[n]) for n, p in run.engine.module.named_parameters())
out["metrics"] = {k: metrics[k] for k in ("kl", "kl_coef", "loss")}
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def joined() -> dict:
    """What a process with the toy folder joined sees."""
    # Not this process's rendezvous: a test before may have started a process group on MASTER_PORT here,
    # which the child would find taken (EADDRINUSE); the child picks a free port of its own.
    inherited = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env = {**inherited, catalog.PLUGINS_ENV: "tests.unit.toy_algorithm", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHECKS], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert done.returncode == 0 and line, done.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def test_the_folder_joins_the_catalog_opt_in(joined):
    builtin = catalog.default_run()  # this process's: the repository's folders alone
    assert joined["names"] == [*catalog.names(), NAME] and joined["default_run"] == builtin
    assert joined["arm"]  # the ablation trains it where an arm names it
    assert NAME not in joined["stages"] and joined["compare_deps"] == []  # a default run neither trains nor needs it
    assert joined["gpu_stages"] == ["sft", *[a for a in builtin if a in catalog.gpu_limited()], "evaluate"]


def test_its_settings_are_a_params_section_a_tune_space_and_a_rule(joined):
    assert joined["section"] == {"kl_coef": 0.1, "baseline": "batch_mean"}
    assert joined["space"] == {"reinforce_kl.kl_coef": {"low": 0.001, "high": 0.2, "log": True}}
    assert "reinforce_kl.kl_cof" in joined["typo"] and "kl_coef" in joined["typo"]  # closed, with a did-you-mean
    assert "leaves the policy unanchored" in joined["rule"]  # checked for the arm that trains it


def test_its_smoke_size_comes_from_its_spec(joined):
    assert joined["smoke"] == ["none", 0.01]


def test_it_trains_a_step_with_a_reference_for_its_kl_penalty(joined):
    assert joined["reference"] and joined["moved"]
    m = joined["metrics"]
    assert m["kl_coef"] == 0.1 and m["kl"] >= 0 and m["loss"] == m["loss"]  # k3 >= 0; the loss is a number


def test_nothing_outside_the_folder_names_it():
    """One folder: no file of the project's code, params or tests (this test aside) names the algorithm
    or its folder, and a process without the variable knows nothing of it."""
    roots = ("grpoflow", "verifiers", "tasks", "flows", "benchmarks", "params", "tests")
    naming = [
        str(p.relative_to(REPO))
        for root in roots
        for p in (REPO / root).rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".yaml", ".md")
        and not p.is_relative_to(FOLDER)
        and p != Path(__file__)
        and ("reinforce_kl" in (text := p.read_text(errors="ignore")) or "toy_algorithm" in text)
    ]
    assert naming == [] and NAME not in catalog.names()
