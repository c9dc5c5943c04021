"""One arm's tuning as flows/tune.py runs it: its Optuna study in the project's SQLite file (opened
or resumed), its trials (each a Prefect task around a ``tasks.tune_trial`` process, flows/trial.py)
until the arm's step budget is spent, and its MLflow parent run with a child per trial."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import yaml
from prefect import task
from prefect.cache_policies import NONE

from flows import lineage, workspace
from flows import trial as trial_process
from grpoflow import catalog
from grpoflow.config import ARMS, ConfigError, Params, arm_params, unknown_name
from grpoflow.tuning.budget import Budget
from grpoflow.tuning.report import ArmTuning, TrialRow
from grpoflow.tuning.space import describe, suggest, trial_set
from tasks import tracking
from tasks.cli import EXIT_VERDICT
from tasks.stages import stage
from tasks.tune_trial import run_name

if TYPE_CHECKING:
    import optuna

# A file of its own beside MLflow's mlflow.db: both keep their schema version in a table of the
# same name (alembic_version), so one database cannot hold both.
OPTUNA_DB = Path("optuna.db")
SAMPLER = "Optuna's TPE sampler"
TUNE_DIR = workspace.STATE_DIR / "tune"
VIEW = TUNE_DIR / "data"  # the prepared data's train and val splits: a trial cannot read test
VIEW_FILES = ("train.jsonl", "val.jsonl")
REFERENCE = stage("sft").file("out")
PREPARED = stage("prepare").file("out")
STEPS_ATTR = "steps"  # a finished trial's training steps (user attribute): the budget counts them


class TrialCrashed(RuntimeError):
    """A trial's process failed for a reason another trial would meet too (not a training verdict)."""


def check_arm(params: Params, arm: str) -> None:
    """:class:`ConfigError` for an arm neither built in nor the set's, or a name unfit for file names."""
    known = sorted({*ARMS, *params.ablation.custom_arms})
    if arm not in known:
        raise ConfigError(unknown_name("arm", arm, known))
    if not re.fullmatch(r"[a-z0-9_]+", arm):
        raise ConfigError(f"arm name {arm!r}: use lower-case letters, digits and _ (it names files and studies)")


def trial_budget(params: Params) -> tuple[Budget, int]:
    """Every arm's budget (``tune.trials`` x steps per trial) and its trials' val evaluation interval."""
    tune = params.tune
    return Budget(tune.trials, tune.trial_steps(params.rl.steps)), tune.trial_eval_every(params.rl.steps)


def data_view(prepared: str | Path = PREPARED) -> Path:
    """:data:`VIEW`, filled from the prepared data: its train and val splits, nothing else."""
    shutil.rmtree(VIEW, ignore_errors=True)
    VIEW.mkdir(parents=True)
    for name in VIEW_FILES:
        shutil.copy2(Path(prepared) / name, VIEW / name)
    return VIEW


def study_name(params_file: str, arm: str) -> str:
    """The arm's study: ``<set>-<arm>``, the set named by its file."""
    return f"{Path(params_file).stem}-{arm}"


def reference_hash(lock: str | Path = "dvc.lock") -> str:
    """The SFT reference's digest as DVC recorded it when the sft stage last ran ("none" before)."""
    outs = (lineage.locked_stages(lock).get("sft") or {}).get("outs") or []
    return next((str(o.get("md5")) for o in outs if o.get("path") == REFERENCE), "none")


def fingerprint(params: Params, arm: str) -> str:
    """What trials must share to be compared in one study: the arm's set as trials train it, the
    tuning settings but the number of trials (more trials extend a study), the data and the reference."""
    algorithm = params.ablation.arm(arm).algorithm
    budget, eval_every = trial_budget(params)
    sections = {"data", "model", "prompt", "rewards", "sandbox", "sft", "rl", *catalog.sections()}
    payload = {
        "set": arm_params(params, arm).model_dump(mode="json", include=sections),
        "seed": params.experiment.seed,
        "tune": params.tune.model_dump(mode="json", exclude={"trials", *catalog.names(), "steps", "eval_every"}),
        "trial": [budget.steps, eval_every],  # as resolved: null and rl.steps spelled out are the same
        "space": {k: d.model_dump(mode="json") for k, d in params.tune.space(algorithm).items()},
        "data": tracking.data_hash(),
        "reference": reference_hash(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def open_study(name: str, params: Params, print_: Callable[[str], None], fp: str, fresh: bool) -> optuna.Study:
    """Study ``name`` in :data:`OPTUNA_DB`, created or resumed; an interrupted trial is redone with
    its settings. :class:`ConfigError` when it was made from other settings (``fresh`` deletes it)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the flow prints one line per trial
    tune, storage = params.tune, f"sqlite:///{OPTUNA_DB.resolve()}"
    if fresh and name in optuna.get_all_study_names(storage):
        optuna.delete_study(study_name=name, storage=storage)
        print_(f"{name}: deleted the study (--fresh)")
    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=tune.pruner.startup_trials, n_warmup_steps=tune.pruner.warmup_steps
        )
        if tune.pruner.enabled
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=name, storage=storage, pruner=pruner, direction="maximize", load_if_exists=True
    )
    # Seeded by what the study holds: a fresh study proposes the same trials as before, and a resumed one does
    # not draw its random start-up trials again from the top (it repeated the first trials' settings).
    seed = tune.sampler_seed + len(study.trials)
    study.sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=tune.startup_trials)
    made = study.user_attrs.get("fingerprint")
    if made is None:
        study.set_user_attr("fingerprint", fp)
    elif made != fp:
        raise ConfigError(
            f"study {name} in {OPTUNA_DB} was made from other settings, data or tuning options than this run's: its "
            "trials would not compare with new ones. `--fresh` starts it over (or undo the change)"
        )
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params)
        print_(f"{name}: trial {t.number} was interrupted; its settings are tried again")
    return study


def rows(study: optuna.Study) -> list[TrialRow]:
    """The study's finished trials (an interrupted one, redone, is left out)."""
    from optuna.trial import TrialState

    states = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}
    out = []
    for t in study.get_trials(deepcopy=False, states=tuple(states)):
        if STEPS_ATTR not in t.user_attrs:
            continue
        last = t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
        value = t.value if t.state == TrialState.COMPLETE else last if t.state == TrialState.PRUNED else None
        out.append(TrialRow(t.number, states[t.state], int(t.user_attrs[STEPS_ATTR]), value, dict(t.params)))
    return out


@dataclass(frozen=True)
class Arm:
    """What every trial of one arm shares."""

    name: str
    study: optuna.Study
    arm_set: Params
    space: dict
    budget: Budget
    eval_every: int
    seed: int
    view: Path
    env: dict[str, str]

    @property
    def algorithm(self) -> str:
        """The algorithm the arm trains (grpo or ppo)."""
        return self.arm_set.ablation.arm(self.name).algorithm


@task(name="tune-trial", task_run_name="{arm_name}-t{number}", cache_policy=NONE)
def trial_task(
    arm_name: str, number: int, cmd: list[str], env: dict[str, str], folder: Path, judge: trial_process.Judge
) -> trial_process.Ran:
    """One trial's process, followed and pruned (flows/trial.py)."""
    return trial_process.run(cmd, env, folder / "history.csv", folder / "trial.log", judge)


def _command(arm: Arm, number: int, params_path: Path, folder: Path) -> list[str]:
    paths = {"out": "model", "checkpoints": "checkpoints", "metrics": "metrics.json", "history": "history.csv"}
    cmd = [sys.executable, "-m", "tasks.tune_trial", "--params", str(params_path), "--arm", arm.name]
    cmd += ["--trial", str(number), "--seed", str(arm.seed), "--data", str(arm.view), "--reference", REFERENCE]
    return cmd + [x for flag, name in paths.items() for x in (f"--{flag}", str(folder / name))]


def one_trial(arm: Arm) -> TrialRow:
    """Ask the study for a trial, train it (pruned when it trails), tell the study its outcome."""
    from optuna.trial import TrialState

    trial = arm.study.ask()
    settings = suggest(trial, arm.space)
    folder = TUNE_DIR / arm.study.study_name / f"t{trial.number}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    params_path = folder / "params.yaml"
    trial_params = trial_set(arm.arm_set, arm.algorithm, settings, arm.budget.steps, arm.eval_every)
    params_path.write_text(yaml.safe_dump(trial_params.model_dump(mode="json"), sort_keys=False))

    def judge(step: int, value: float) -> bool:
        trial.report(value, step)
        return step < arm.budget.steps and trial.should_prune()  # the last score ends the trial anyway

    cmd = _command(arm, trial.number, params_path, folder)
    ran = cast(trial_process.Ran, trial_task(arm.name, trial.number, cmd, arm.env, folder, judge))
    for leftover in ("model", "checkpoints"):  # a trial's weights serve nothing once it is scored
        shutil.rmtree(folder / leftover, ignore_errors=True)
    metrics = folder / "metrics.json"
    score = json.loads(metrics.read_text()).get("val_accuracy") if ran.code == 0 and metrics.is_file() else None
    if ran.pruned_at is None and score is None and ran.code != EXIT_VERDICT:
        # Not these settings' outcome (a diagnosed stop is: diverged, out of memory): it spends no
        # budget, and the run stops with the cause, which every later trial would meet.
        arm.study.tell(trial, state=TrialState.FAIL)
        raise TrialCrashed(
            f"trial {trial.number} of {arm.study.study_name} failed (exit {ran.code}); its log "
            f"{folder / 'trial.log'} ends:\n{trial_process.log_tail(folder / 'trial.log')}"
        )
    trial.set_user_attr(STEPS_ATTR, ran.steps)
    if ran.pruned_at is not None:
        arm.study.tell(trial, state=TrialState.PRUNED)
    elif score is not None:
        arm.study.tell(trial, float(score))
    else:
        arm.study.tell(trial, state=TrialState.FAIL)
    return next(r for r in rows(arm.study) if r.number == trial.number)


def _mark_child(experiment_id: str, parent_id: str, arm: str, row: TrialRow) -> None:
    """The trial's MLflow run, tagged with its state (a pruned one ends KILLED) and its score."""
    import mlflow

    client = mlflow.MlflowClient()
    where = f"tags.mlflow.parentRunId = '{parent_id}' and attributes.run_name = '{run_name(arm, row.number)}'"
    found = client.search_runs([experiment_id], filter_string=where)
    for run in found:
        client.set_tag(run.info.run_id, "tune.state", row.state)
        if row.value is not None:
            client.log_metric(run.info.run_id, "tune/val_accuracy", row.value)
        if row.state == "pruned":
            client.set_terminated(run.info.run_id, "KILLED")


def _line(arm: str, row: TrialRow) -> str:
    settings = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.settings.items())
    score = "" if row.value is None else f", val accuracy {row.value:.3f}"
    return f"{arm} trial {row.number}: {row.state} after {row.steps} steps{score} ({settings})"


def tune_arm(
    params: Params, params_file: str, name: str, view: Path, fresh: bool, flow_run_id: str
) -> tuple[ArmTuning, str]:
    """Tune arm ``name`` until its budget is spent: its summary and its MLflow parent run's id."""
    import mlflow

    algorithm = params.ablation.arm(name).algorithm
    budget, eval_every = trial_budget(params)
    study_id = study_name(params_file, name)
    study = open_study(study_id, params, print, fingerprint(params, name), fresh)
    space = params.tune.space(algorithm)
    with tracking.tuning_run(params, params_file, f"tune/{study_id}", flow_run_id) as parent:
        mlflow.log_params(
            {"search/arm": name, "search/algorithm": algorithm, "search/study": study_id}
            | {"search/budget_steps": budget.total, "search/trial_steps": budget.steps, "search/eval_every": eval_every}
            | {f"search/space/{k}": describe(k, d) for k, d in space.items()}
        )
        env = {**os.environ, tracking.PARENT_ENV: parent.info.run_id, tracking.FLOW_RUN_ENV: flow_run_id}
        arm = Arm(name, study, arm_params(params, name), space, budget, eval_every, params.tune.train_seed, view, env)
        spent = sum(r.steps for r in rows(study))
        print(f"{name}: study {study_id}, {len(rows(study))} trials done, {spent} of {budget.total} steps spent")
        while budget.fits(spent):
            row = one_trial(arm)
            spent += row.steps
            print(_line(name, row))
            _mark_child(parent.info.experiment_id, parent.info.run_id, name, row)
            if row.value is not None:
                mlflow.log_metric("tune/val_accuracy", row.value, step=row.number)
        done = ArmTuning(name, algorithm, study_id, space, budget, eval_every, rows(study))
        mlflow.log_metrics({"tune/steps_spent": done.spent, "tune/trials": len(done.trials)})
        if done.best is not None:
            mlflow.log_metric("tune/best_val_accuracy", float(done.best.value or 0.0))
            mlflow.log_params({f"best/{k}": v for k, v in done.best.settings.items()})
        return done, parent.info.run_id
