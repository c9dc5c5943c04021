"""A ``--set`` run as DVC sees it: only the keys it set differ, and once the run's edits are undone
the workspace is byte for byte what it was, with exactly the stages that read a set key stale.

No stage trains here: each stage's outputs are stand-ins that ``dvc commit`` records as a real run
would (its deps, params and outs), so the test checks DVC's verdicts, not the stages, in seconds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from flows.pipeline import workspace_for_run
from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable
OVERRIDES = {"rl.steps": 20, "evaluate.max_examples": 8}  # 20: above the set's PPO warm-up
# The stages that read rl (grpo, ppo) or evaluate.max_examples (evaluate).
READERS = {"grpo", "ppo", "evaluate"}  # not sft, which reads rl.rollout_engine and one rl.sampling key


def _stand_in_outputs(project: Path) -> None:
    """A file in place of every output dvc.yaml declares (a directory's gets a file inside)."""
    spec = yaml.safe_load((project / "dvc.yaml").read_text())
    for stage in spec["stages"].values():
        for out in [*stage.get("outs", []), *stage.get("metrics", [])]:
            path = project / (out if isinstance(out, str) else next(iter(out)))
            target = path if path.suffix else path / "stand-in.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}\n" if path.suffix == ".json" else "stand-in\n")


def _stale(project: Path, env: dict[str, str]) -> set[str]:
    """The stages ``dvc status`` reports as changed."""
    out = run([PY, "-m", "dvc", "status", "--json"], project, env)
    assert out.returncode == 0, out
    return set(json.loads(out.stdout.strip() or "{}"))


def test_a_set_run_changes_only_its_keys_in_dvcs_eyes_and_leaves_the_workspace_as_it_was(project, run_env, monkeypatch):
    monkeypatch.chdir(project)
    _stand_in_outputs(project)
    assert run([PY, "-m", "dvc", "commit", "-f"], project, run_env).returncode == 0
    assert _stale(project, run_env) == set()
    tracked = ["params/default.yaml", "dvc.yaml", "dvc.lock"]
    before = {p: (project / p).read_bytes() for p in tracked}

    with workspace_for_run("test", "params/default.yaml", OVERRIDES):
        # What the flow's `dvc repro --single-item` sees with the overrides in place: only their readers.
        assert _stale(project, run_env) == READERS
        ran = run([PY, "-m", "dvc", "commit", "-f", *sorted(READERS)], project, run_env)  # as if they ran
        assert ran.returncode == 0, ran
        assert _stale(project, run_env) == set()

    assert {p: (project / p).read_bytes() for p in tracked[:2]} == {p: before[p] for p in tracked[:2]}
    # Their outputs now hold the overrides' results: stale until a plain run redoes them; nothing else is.
    assert _stale(project, run_env) == READERS
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    recorded = lock["stages"]["validate_verifiers"]["params"]["params/default.yaml"]
    assert recorded == {key: _at(yaml.safe_load(before["params/default.yaml"]), key) for key in recorded}


def _at(tree: dict, dotted: str):
    """The value at ``dotted`` (``experiment.seed``), as dvc.lock records a params key."""
    for part in dotted.split("."):
        tree = tree[part]
    return tree
