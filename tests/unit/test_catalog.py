"""The algorithm catalog (grpoflow/catalog.py) is the only list of algorithms: a third one, plain
REINFORCE (tests/unit/toy_reinforce.py) in a temporary catalog (tests/unit/toy_catalog.py), validates
as params, renders its stage and its arm in dvc.yaml, and trains on the shared policy trainer, with
no edit under ``tasks/`` or ``flows/``. Every pluggable kind is checked against its name table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from grpoflow import catalog
from grpoflow.config import ConfigError, validate_params
from tests.unit import rl_workspace
from tests.unit.toy_catalog import ENTRY

REPO = Path(__file__).resolve().parents[2]


def test_an_unknown_algorithm_is_refused_by_name_where_a_set_names_one():
    with pytest.raises(ConfigError, match=r"custom_arms\.mine\.algorithm.*unknown algorithm 'reinforce'"):
        validate_params({"ablation": {"arms": ["mine"], "custom_arms": {"mine": {"algorithm": "reinforce"}}}})
    with pytest.raises(ConfigError, match=r"launch\.stages\.0.*unknown algorithm 'reinforce'"):
        validate_params({"launch": {"stages": ["reinforce"]}})


def test_a_third_algorithm_validates_as_an_arm_and_a_launched_stage_in_a_temporary_catalog():
    with catalog.extended(ENTRY):
        params = validate_params(
            {
                "ablation": {
                    "arms": ["grpo", "reinforce", "mine"],
                    "custom_arms": {"mine": {"algorithm": "reinforce"}},
                },
                "launch": {"stages": ["reinforce"]},
                "rl": {"adaptive_kl": {"enabled": False}},
            }
        )
        assert params.ablation.arm("reinforce").algorithm == params.ablation.arm("mine").algorithm == "reinforce"
        # The shared rules apply: it has no KL coefficient, so nothing can adapt one.
        with pytest.raises(ConfigError, match="reinforce's KL coefficient"):
            validate_params({"rl": {"adaptive_kl": {"enabled": True}}, "experiment": {"stages": ["reinforce"]}})
    assert "reinforce" not in catalog.ALGORITHMS  # the catalog is restored after the block


def _render(tmp_path: Path, params: dict) -> dict:
    """dvc.yaml as ``python -m tasks.stages --write`` renders it for ``params``, with the toy catalog line."""
    (tmp_path / "set.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, catalog.PLUGINS_ENV: "tests.unit.toy_catalog:ENTRY", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tasks.stages", "--write", "--params", "set.yaml"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]


def test_a_third_algorithm_renders_its_stage_and_its_arm_with_no_edit_under_tasks_or_flows(tmp_path):
    stages = _render(tmp_path, {"ablation": {"arms": ["grpo", "reinforce"]}})
    own = stages["reinforce"]
    assert own["cmd"].startswith("python -m tasks.train --params") and own["cmd"].endswith("--algorithm reinforce")
    assert "models/reinforce" in own["outs"] and "tests/unit/toy_reinforce.py" in own["deps"]
    assert "grpo" not in [p for p in own["params"][0]["${params_file}"]]  # GRPO's own section is not its
    assert {"sft=models/sft", "reinforce=models/reinforce"} <= set(re.findall(r"\S+=\S+", stages["evaluate"]["cmd"]))
    assert "metrics/reinforce_history.csv" in stages["compare"]["deps"]
    arm = stages["arm_reinforce_s0"]
    assert arm["cmd"].startswith("python -m tasks.arm") and "tests/unit/toy_reinforce.py" in arm["deps"]
    assert "metrics/arms/reinforce-s0.json" in " ".join(stages["ablation_report"]["cmd"].split())


def test_a_third_algorithm_trains_on_the_shared_policy_trainer(tmp_path):
    from grpoflow.rl.algorithm import ALGORITHMS
    from grpoflow.rl.run import build_rl_run

    workspace = rl_workspace.build(tmp_path)
    tiny = {
        "rl": {
            "steps": 2,
            "prompts_per_step": 4,
            "num_generations": 2,
            "eval_every": 100,
            "checkpoint_every": 100,
            "sampling": {"max_completion_length": 4},
            "engine": {"micro_batch_size": 4, "lr": 0.05},
        }
    }
    with catalog.extended(ENTRY):
        run = build_rl_run(
            validate_params(tiny), ALGORITHMS["reinforce"], data_dir=workspace / "data", reference_dir=workspace / "ref"
        )
        # Unequal rewards (every other completion's), so the batch-mean baseline leaves advantages != 0.
        run.trainer.batches.reward = lambda completions, rows: (torch.arange(len(completions)) % 2 * 1.0, {})
        before = {n: p.detach().clone() for n, p in run.engine.module.named_parameters()}
        metrics = run.trainer.step(0)
    assert run.trainer.ref is None  # no KL key: no reference is loaded
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    moved = [n for n, p in run.engine.module.named_parameters() if not torch.equal(p, before[n])]
    assert moved, "the policy-gradient step changed no weight"


def test_every_pluggable_kind_registers_exactly_its_name_table():
    import importlib

    import grpoflow.rl.advantages as advantages
    import grpoflow.rl.losses as losses
    import verifiers
    from grpoflow.algorithms.grpo.config import ADVANTAGE_ESTIMATORS
    from grpoflow.algorithms.ppo.config import CRITIC_ESTIMATORS
    from grpoflow.config.rl import AGGREGATIONS, KL_ESTIMATOR_NAMES
    from grpoflow.rl.algorithm import ALGORITHMS
    from verifiers.catalog import BUILTIN

    for entry in catalog.ALGORITHMS.values():  # an algorithm registers when its update module is imported
        importlib.import_module(entry.module)
    kinds = {
        "advantage estimator": (advantages.ESTIMATORS, ADVANTAGE_ESTIMATORS),
        "critic estimator": (advantages.CRITIC_ESTIMATOR_FNS, CRITIC_ESTIMATORS),
        "KL estimator": (losses.KL_ESTIMATORS, KL_ESTIMATOR_NAMES),
        "aggregation": (losses.AGGREGATIONS, AGGREGATIONS),
        "algorithm": (ALGORITHMS, catalog.BUILTIN),
    }
    for kind, (registry, table) in kinds.items():
        assert sorted(registry.registered()) == sorted(table), kind
        with pytest.raises(ValueError, match="add it to"):
            registry.register("not-in-the-table")(lambda *a: None)
    for name in BUILTIN:  # verifiers keep their own registry (verifiers/ imports nothing of grpoflow/)
        verifiers.registry.options_model(name)  # imports the module the catalog names for it
    assert set(BUILTIN) <= set(verifiers.registry._REGISTRY)


# Where the algorithms' names may be written: each algorithm's own folder and stage CLI, the catalog
# (which names the default), and the name tables of other kinds that share the paper's name (the
# "grpo" aggregation and estimator).
OWN = {
    '"grpo"': {
        "grpoflow/catalog.py",
        "grpoflow/algorithms/grpo/__init__.py",
        "grpoflow/algorithms/grpo/update.py",
        "grpoflow/algorithms/grpo/config.py",
        "tasks/grpo.py",
        "grpoflow/config/rl.py",  # rl.aggregation: grpo (its name table and default)
        "grpoflow/rl/losses.py",  # the grpo aggregation's registration
        "grpoflow/rl/advantages.py",  # the grpo estimator's registration
        "grpoflow/config/advice.py",  # the paper's aggregation and estimator, by their names
    },
    '"ppo"': {
        "grpoflow/algorithms/ppo/__init__.py",
        "grpoflow/algorithms/ppo/update.py",
        "grpoflow/algorithms/ppo/config.py",
        "tasks/ppo.py",
    },
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_an_algorithms_name_is_written_only_in_its_own_folder(name):
    found = {
        str(path.relative_to(REPO))
        for folder in ("grpoflow", "tasks", "flows")
        for path in (REPO / folder).rglob("*.py")
        if name in path.read_text()
    }
    assert found <= OWN[name], f"{name} written outside its own modules: {sorted(found - OWN[name])}"
