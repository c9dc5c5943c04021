"""The tuning flow's smoke test: 2 trials x 2 steps per arm through the real Optuna (its study in
the project's SQLite file), MLflow (a parent per arm, a child per trial) and DVC (the shared stages
come from its cache); the overlays it writes lie inside the space, and running it again resumes
the studies without training a finished trial again."""

from __future__ import annotations

import sqlite3
import sys

import optuna
import pytest

from grpoflow.tuning.overlay import overlay_budget, read_overlay
from tests.e2e.conftest import run

pytestmark = pytest.mark.e2e
PY = sys.executable
# Two trials of two steps per arm, val accuracy after each step (the pruner's input); the ranges cut to
# what two steps and the smoke batch allow (a warm-up below 2 steps; G that 4 prompts split into micro-batches of 8).
SMOKE_TUNE = [
    "tune.steps=2",
    "tune.eval_every=1",
    "tune.ppo.critic_warmup_steps.high=1",
    "tune.grpo.num_generations.choices=[2, 4]",
]


def _trials(project, arm: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=f"smoke-{arm}", storage=f"sqlite:///{project / 'optuna.db'}")
    return study.get_trials(deepcopy=False)


def _mlflow_runs(project) -> list[tuple[str, str, str | None, str | None]]:
    """(run name, status, parent run id, tune.state tag) of every run in the project's MLflow store."""
    with sqlite3.connect(project / "mlflow.db") as db:
        rows = db.execute(
            "select r.name, r.status, p.value, s.value from runs r "
            "left join tags p on p.run_uuid = r.run_uuid and p.key = 'mlflow.parentRunId' "
            "left join tags s on s.run_uuid = r.run_uuid and s.key = 'tune.state'"
        ).fetchall()
    return [tuple(r) for r in rows]


def test_two_trials_per_arm_give_studies_child_runs_and_overlays_and_a_rerun_resumes(smoke_sft, run_env):
    project, params_file = smoke_sft
    tune = [PY, "-m", "flows.tune", "--params", params_file, "--arms", "grpo", "ppo", "--trials", "2"]
    first = run([*tune, "--set", *SMOKE_TUNE], project, run_env, timeout=1200)
    assert first.returncode == 0, first
    log = first.stdout + first.stderr
    assert all(f"{stage}: cached" in log for stage in ("prepare", "sft"))  # the shared stages, from DVC

    space = {
        "grpo": {"rl.engine.lr": (5e-5, 1e-3), "grpo.beta": (1e-3, 0.2), "rl.sampling.temperature": (0.6, 1.2)},
        "ppo": {"ppo.critic_engine.lr": (1e-4, 3e-3), "ppo.lam_critic": (0.9, 1.0), "ppo.critic_warmup_steps": (0, 1)},
    }
    finished = {}
    for arm in ("grpo", "ppo"):
        trials = _trials(project, arm)  # the same file holds both studies; no trial pruned before two finish
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
        assert all(t.user_attrs["steps"] == 2 and sorted(t.intermediate_values) == [1, 2] for t in trials)
        finished[arm] = [(t.number, t.datetime_complete) for t in trials]
        path = project / "params" / "tuned" / f"smoke-{arm}.yaml"
        overlay = read_overlay(path)  # the settings; tuned_with records the tuning that found them
        assert overlay_budget(path) == 4
        best = max(trials, key=lambda t: t.value)
        assert overlay == best.params and set(overlay) == set(trials[0].params)  # only the tuned keys
        for key, (low, high) in space[arm].items():
            assert low <= overlay[key] <= high, (arm, key, overlay[key])
    assert _trials(project, "grpo")[0].params["rl.num_generations"] in (2, 4)

    runs = _mlflow_runs(project)
    with sqlite3.connect(project / "mlflow.db") as db:
        ids = dict(db.execute("select name, run_uuid from runs").fetchall())
        logged = dict(db.execute("select key, value from params where run_uuid = ?", (ids["tune/grpo/t0"],)).fetchall())
    for arm in ("grpo", "ppo"):  # a parent per arm, a child per trial with the trial's settings as params
        children = sorted((n, s, st) for n, s, p, st in runs if p == ids[f"tune/smoke-{arm}"])
        assert children == [(f"tune/{arm}/t{i}", "FINISHED", "complete") for i in (0, 1)]
    grpo_t0 = _trials(project, "grpo")[0]
    assert logged["arm"] == "grpo" and logged["tune_trial"] == "0" and logged["rl.steps"] == "2"
    assert all(logged[k] == str(v) for k, v in grpo_t0.params.items())
    report = (project / "reports" / "tune.md").read_text()
    assert "Budget: 2 trials x 2 steps = 4 training steps; spent 4 in 2 trials" in report
    assert "| `ppo.lam_actor` | 0.9 .. 1 |" in report and "test split is not read" in report
    view = project / ".grpoflow" / "tune" / "data"  # what the trials read: no test split
    assert sorted(p.name for p in view.iterdir()) == ["train.jsonl", "val.jsonl"]

    # Again: both studies resume with their two trials finished, and nothing trains.
    again = run([*tune, "--set", *SMOKE_TUNE], project, run_env, timeout=1200)
    assert again.returncode == 0, again
    for arm in ("grpo", "ppo"):
        assert [(t.number, t.datetime_complete) for t in _trials(project, arm)] == finished[arm]
        assert f"{arm}: study smoke-{arm}, 2 trials done, 4 of 4 steps spent" in again.stdout + again.stderr
    assert sum(name.startswith("tune/grpo/t") for name, *_ in _mlflow_runs(project)) == 2
