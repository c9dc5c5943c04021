"""Tuning's parts on hand-checkable cases: the spaces in the schema, what a trial samples and
trains, the equal step budget, the tuned overlay and how the ablation applies it, the report, the
study's resume, and a trial process followed and pruned by Optuna's real median pruner."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml

from grpoflow import metric_names as M
from grpoflow.config import ConfigError, Dim, TuneConfig, arm_params, load_params, validate_params, value_at
from grpoflow.tuning.budget import Budget
from grpoflow.tuning.overlay import (
    dotted,
    nested,
    overlay_budget,
    overlay_path,
    overlay_text,
    read_overlay,
    tuned_arm_overrides,
)
from grpoflow.tuning.report import ArmTuning, TrialRow, markdown
from grpoflow.tuning.space import describe, is_integer, space_problems, suggest, trial_set
from tasks.stages import ablation_stages, arm_stage, stages_for

REPO = Path(__file__).resolve().parents[2]
DEFAULT = load_params(REPO / "params" / "default.yaml")


def test_each_algorithm_searches_the_settings_the_issue_names():
    tune = TuneConfig()
    assert list(tune.space("grpo")) == ["rl.engine.lr", "grpo.beta", "rl.num_generations", "rl.sampling.temperature"]
    assert list(tune.space("ppo")) == [
        "ppo.actor_lr",
        "ppo.critic_engine.lr",
        "ppo.lam_actor",
        "ppo.lam_critic",
        "ppo.cliprange_value",
        "ppo.critic_warmup_steps",
        "ppo.kl_coef",
    ]
    for algorithm in ("grpo", "ppo"):  # every key is a real key of the schema
        for key in tune.space(algorithm):
            value_at(DEFAULT, key)


def test_a_range_given_in_part_keeps_the_rest_and_null_leaves_a_setting_out():
    params = validate_params(
        {
            "tune": {
                "ppo": {"critic_warmup_steps": {"high": 5}, "kl_coef": None},
                "grpo": {"num_generations": {"choices": [2, 4]}, "lr": {"low": 1e-4, "high": 2e-4}},
            }
        }
    )
    assert params.tune.ppo.critic_warmup_steps == Dim(low=0, high=5)
    assert "ppo.kl_coef" not in params.tune.space("ppo")
    assert params.tune.grpo.num_generations == Dim(choices=[2, 4])
    assert params.tune.grpo.lr == Dim(low=1e-4, high=2e-4, log=True)  # log kept from the default


@pytest.mark.parametrize(
    "dim, message",
    [
        ({"low": 2, "high": 1}, "above high"),
        ({"low": 0, "high": 1, "log": True}, "low > 0"),
        ({"low": 0, "high": 1, "choices": [1]}, "not both"),
        ({"low": 0, "high": None}, "give low and high"),
    ],
)
def test_a_bad_range_is_refused_naming_its_key(dim, message):
    with pytest.raises(ConfigError, match=rf"tune.grpo.temperature:.*{message}"):
        validate_params({"tune": {"grpo": {"temperature": {"log": False, **dim}}}})


def test_integer_settings_are_told_apart():
    assert is_integer("rl.num_generations") and is_integer("ppo.critic_warmup_steps")
    assert not is_integer("rl.engine.lr") and not is_integer("ppo.lam_actor")  # float | None


def test_samples_stay_inside_the_space_with_whole_numbers_where_the_setting_takes_them():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space = TuneConfig().space("ppo") | TuneConfig().space("grpo")
    for _ in range(30):
        values = suggest(study.ask(), space)
        assert 5e-5 <= values["rl.engine.lr"] <= 1e-3 and 1e-3 <= values["ppo.kl_coef"] <= 0.2
        assert isinstance(values["ppo.critic_warmup_steps"], int) and 0 <= values["ppo.critic_warmup_steps"] <= 30
        assert values["rl.num_generations"] in (4, 8, 16)


def test_a_trial_trains_the_arm_with_its_settings_for_its_steps_without_a_preflight():
    params = validate_params({"ablation": {"custom_arms": {"mine": {"overrides": {"rl.entropy_coef": 0.01}}}}})
    trial = trial_set(arm_params(params, "rloo"), "grpo", {"rl.engine.lr": 3e-4, "rl.num_generations": 4}, 40, 10)
    assert (trial.rl.engine.lr, trial.rl.num_generations, trial.grpo.advantage_estimator) == (3e-4, 4, "rloo")
    assert (trial.rl.steps, trial.rl.eval_every, trial.rl.checkpoint_every, trial.rl.preflight.prompts) == (
        40,
        10,
        40,
        0,
    )
    assert trial_set(arm_params(params, "mine"), "grpo", {}, 40, 10).rl.entropy_coef == 0.01


def test_space_ends_the_rules_refuse_are_found_before_any_trial():
    ppo = arm_params(DEFAULT, "ppo")
    assert space_problems(ppo, "ppo", DEFAULT.tune.space("ppo"), 150, 30) == []
    # 2 steps: a warm-up of 30 leaves no policy step (the low end, 0, does); neither does the set's own 14
    problems = space_problems(ppo, "ppo", DEFAULT.tune.space("ppo"), 2, 1)
    assert "ppo.critic_warmup_steps=30" in [p.split(":")[0] for p in problems]
    assert "ppo.critic_warmup_steps=0" not in [p.split(":")[0] for p in problems]
    small = validate_params({"rl": {"prompts_per_step": 4, "engine": {"micro_batch_size": 8}}})
    g = {"rl.num_generations": Dim(choices=[2, 3, 4])}  # 4 prompts x G=3 = 12 rows: not a multiple of 8
    assert [p.split(":")[0] for p in space_problems(small, "grpo", g, 10, 5)] == ["rl.num_generations=3"]


def test_a_grpo_trial_is_checked_by_grpos_rules_alone_and_a_ppo_trial_by_ppos():
    # the set's PPO warm-up of 14 would leave none of 2 steps to a PPO policy, and is none of GRPO's business
    assert trial_set(arm_params(DEFAULT, "grpo"), "grpo", {}, 2, 1).experiment.stages == ["grpo"]
    with pytest.raises(ConfigError, match="ppo.critic_warmup_steps=14 leaves none of rl.steps=2"):
        trial_set(arm_params(DEFAULT, "ppo"), "ppo", {}, 2, 1)


def test_the_report_states_each_range_as_searched():
    assert describe("rl.engine.lr", Dim(low=5e-5, high=1e-3, log=True)) == "5e-05 .. 0.001 (log)"
    assert describe("ppo.critic_warmup_steps", Dim(low=0, high=30)) == "0 .. 30 (integers)"
    assert describe("rl.num_generations", Dim(choices=[4, 8, 16])) == "one of 4, 8, 16"


def test_the_budget_counts_steps_so_pruned_trials_make_room_for_more():
    budget = Budget(trials=3, steps=10)
    assert budget.total == 30 and budget.fits(20) and not budget.fits(21) and budget.left(26) == 4

    def trials_run(pruned_after: list[int]) -> tuple[int, int]:
        """Trials and steps an arm spends when its trials stop after these steps (10: not pruned)."""
        spent = count = 0
        stops = iter(pruned_after)
        while budget.fits(spent):
            spent, count = spent + next(stops, 10), count + 1
        return count, spent

    assert trials_run([]) == (3, 30)  # nothing pruned: 3 whole trials
    assert trials_run([4, 6]) == (4, 30)  # 4 + 6 steps pruned: one more whole trial fits
    assert trials_run([3]) == (3, 23)  # 7 steps left: no whole trial fits, none is cut short


def test_an_overlay_holds_the_tuned_keys_nested_and_reads_back_dotted(tmp_path):
    settings = {"rl.engine.lr": 0.0003, "grpo.beta": 0.01, "rl.sampling.temperature": 0.9}
    assert nested(settings) == {
        "grpo": {"beta": 0.01},
        "rl": {"engine": {"lr": 0.0003}, "sampling": {"temperature": 0.9}},
    }
    path = tmp_path / "default-grpo.yaml"
    path.write_text(overlay_text(settings, ["Tuned by make tune.", "Best of 8 trials."]))
    assert path.read_text().startswith("# Tuned by make tune.\n# Best of 8 trials.\ngrpo:\n")
    assert read_overlay(path) == settings == dotted(nested(settings))
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="a tuned overlay is a mapping"):
        read_overlay(path)
    assert overlay_path("params/smollm2-135m.yaml", "ppo") == Path("params/tuned/smollm2-135m-ppo.yaml")


def test_a_tuned_arm_keeps_its_own_overrides_and_its_stages_track_the_overlay():
    overrides = tuned_arm_overrides(DEFAULT, {"rloo": {"rl.engine.lr": 3e-4}, "ppo": {"ppo.lam_critic": 1.0}})
    assert overrides == {
        "ablation.custom_arms.rloo": {
            "algorithm": "grpo",
            "overrides": {"grpo.advantage_estimator": "rloo", "rl.engine.lr": 3e-4},
        },
        "ablation.custom_arms.ppo": {"algorithm": "ppo", "overrides": {"ppo.lam_critic": 1.0}},
    }
    params = load_params(REPO / "params" / "default.yaml", overrides)
    rloo = arm_params(params, "rloo")
    assert (rloo.rl.engine.lr, rloo.grpo.advantage_estimator) == (3e-4, "rloo")
    assert "ablation.custom_arms.rloo" in arm_stage("rloo", 0, custom=True).params
    assert not any(k.startswith("ablation") for k in arm_stage("rloo", 0).params)  # untuned: as before
    stages = ablation_stages(["grpo", "rloo"], [0], custom_arms=["rloo"])
    assert [any(k.startswith("ablation") for k in s.params) for s in stages[:2]] == [False, True]
    with_arms = load_params(REPO / "params" / "default.yaml", {"ablation.arms": ["grpo", "ppo"], **overrides})
    wired = {s.name: s.params for s in stages_for(with_arms)}  # what dvc.yaml and the flow get
    assert "ablation.custom_arms.ppo" in wired["arm_ppo_s0"] and "ablation.custom_arms.grpo" not in wired["arm_grpo_s0"]


def test_the_ablation_says_which_arms_it_trains_tuned(tmp_path, monkeypatch):
    from flows.ablation import ablation_overrides, with_tuned

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params" / "tuned").mkdir(parents=True)
    (tmp_path / "params" / "default.yaml").write_text((REPO / "params" / "default.yaml").read_text())
    (tmp_path / "params" / "tuned" / "default-ppo.yaml").write_text("ppo:\n  kl_coef: 0.01\n")
    every = ablation_overrides(["grpo", "ppo"], [0], None)
    tuned, lines = with_tuned("params/default.yaml", ["grpo", "ppo"], every)
    assert lines == [
        "arm grpo: the set's own settings (no params/tuned/default-grpo.yaml)",
        "arm ppo: tuned settings from params/tuned/default-ppo.yaml (its tuning budget not stated): ppo.kl_coef=0.01",
    ]
    assert arm_params(load_params("params/default.yaml", tuned), "ppo").ppo.kl_coef == 0.01
    untuned, lines = with_tuned("params/default.yaml", ["grpo", "ppo"], every, tuned=False)
    assert (
        untuned == every
        and lines[1] == "arm ppo: the set's own settings (params/tuned/default-ppo.yaml ignored (--untuned))"
    )


def test_the_ablation_names_the_budget_its_overlays_were_tuned_on(tmp_path, monkeypatch):
    from flows.ablation import ablation_overrides, with_tuned

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params" / "tuned").mkdir(parents=True)
    (tmp_path / "params" / "default.yaml").write_text((REPO / "params" / "default.yaml").read_text())
    for arm in ("grpo", "ppo"):  # the committed overlays, one of them rewritten with its record
        (tmp_path / "params" / "tuned" / f"default-{arm}.yaml").write_text(
            (REPO / f"params/tuned/default-{arm}.yaml").read_text()
        )
    _, lines = with_tuned("params/default.yaml", ["grpo", "ppo"], ablation_overrides(["grpo", "ppo"], [0], None))
    assert all("(tuned on 900 training steps)" in line for line in lines), lines


def _tuned(budget: Budget, value: float = 0.6) -> ArmTuning:
    trials = [
        TrialRow(i, "complete", budget.steps, value, {"rl.engine.lr": 1e-4 * (i + 1)}) for i in range(budget.trials)
    ]
    space = {"rl.engine.lr": Dim(low=1e-5, high=1e-3, log=True)}
    return ArmTuning("grpo", "grpo", "default-grpo", space, budget, 1, trials)


def test_a_tune_on_a_smaller_budget_writes_beside_the_overlay_and_says_so(tmp_path, monkeypatch):
    from flows.tune import write_overlay

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params" / "tuned").mkdir(parents=True)
    overlay = tmp_path / "params" / "tuned" / "default-grpo.yaml"
    overlay.write_text((REPO / "params" / "tuned" / "default-grpo.yaml").read_text())
    before = overlay.read_text()

    path, note = write_overlay("params/default.yaml", _tuned(Budget(2, 2)))  # a smoke tune: 4 steps
    assert path == "params/tuned/default-grpo.budget-4.yaml" and overlay.read_text() == before
    assert note is not None and "kept (tuned on 900 training steps, this tune on 4)" in note
    assert "--write-overlay" in note and read_overlay(path) == {"rl.engine.lr": 1e-4}
    assert overlay_budget(path) == 4

    path, note = write_overlay("params/default.yaml", _tuned(Budget(2, 2)), replace=True)
    assert (path, note) == ("params/tuned/default-grpo.yaml", None) and overlay_budget(overlay) == 4

    path, note = write_overlay("params/default.yaml", _tuned(Budget(3, 2)))  # 6 steps >= 4: replaces
    assert (path, note) == ("params/tuned/default-grpo.yaml", None) and overlay_budget(overlay) == 6
    overlay.write_text("rl:\n  engine:\n    lr: 0.001\n")  # hand-written: its budget unknown, so kept
    path, note = write_overlay("params/default.yaml", _tuned(Budget(9, 9)))
    assert path.endswith("budget-81.yaml") and "a budget it does not state" in str(note)
    assert overlay_budget(overlay) is None and read_overlay(overlay) == {"rl.engine.lr": 0.001}


def _arm(trials: list[TrialRow]) -> ArmTuning:
    space = {"rl.engine.lr": Dim(low=1e-4, high=1e-3, log=True)}
    return ArmTuning("grpo", "grpo", "default-grpo", space, Budget(3, 10), 2, trials, "params/tuned/default-grpo.yaml")


def test_the_best_trial_is_the_highest_complete_one_and_the_report_states_space_trials_and_budget():
    arm = _arm(
        [
            TrialRow(0, "complete", 10, 0.40, {"rl.engine.lr": 2e-4}),
            TrialRow(1, "pruned", 4, 0.90, {"rl.engine.lr": 9e-4}),  # a pruned score is no final score
            TrialRow(2, "complete", 10, 0.45, {"rl.engine.lr": 5e-4}),
            TrialRow(3, "failed", 6, None, {"rl.engine.lr": 1e-3}),
        ]
    )
    assert arm.best is not None and arm.best.number == 2 and arm.spent == 30
    text = markdown([arm], "params/default.yaml", 1000, "TPE")
    assert "| `rl.engine.lr` | 0.0001 .. 0.001 (log) |" in text
    assert (
        "Budget: 3 trials x 10 steps = 30 training steps; spent 30 in 4 trials (2 complete, 1 pruned, 1 failed)" in text
    )
    assert "| 1 | pruned | 4 | 0.900 | 0.0009 |" in text and "| 3 | failed | 6 |  | 0.001 |" in text
    assert "Best: trial 2, val accuracy 0.450; written to `params/tuned/default-grpo.yaml`." in text
    assert "test split is not read" in text
    assert "No trial completed" in markdown([_arm([TrialRow(0, "pruned", 4, 0.1, {})])], "p.yaml", 0, "TPE")


def test_a_resumed_study_keeps_finished_trials_and_redoes_an_interrupted_one(tmp_path, monkeypatch):
    from flows import tune_study

    monkeypatch.chdir(tmp_path)
    space = DEFAULT.tune.space("grpo")
    study = tune_study.open_study("s-grpo", DEFAULT, print, "fp1", fresh=False)
    done = study.ask()
    suggest(done, space)
    done.set_user_attr(tune_study.STEPS_ATTR, 10)
    study.tell(done, 0.5)
    interrupted = study.ask()
    settings = suggest(interrupted, space)  # then the flow died: the trial stays RUNNING

    said: list[str] = []
    again = tune_study.open_study("s-grpo", DEFAULT, said.append, "fp1", fresh=False)
    assert said == ["s-grpo: trial 1 was interrupted; its settings are tried again"]
    assert [r.number for r in tune_study.rows(again)] == [0]  # the interrupted one counts no steps
    redo = again.ask()
    assert redo.number == 2 and suggest(redo, space) == settings
    with pytest.raises(ConfigError, match="made from other settings"):
        tune_study.open_study("s-grpo", DEFAULT, print, "fp2", fresh=False)
    fresh = tune_study.open_study("s-grpo", DEFAULT, said.append, "fp2", fresh=True)
    assert fresh.trials == [] and said[-1] == "s-grpo: deleted the study (--fresh)"
    assert (tmp_path / "optuna.db").is_file()


def test_a_resumed_study_never_repeats_a_finished_trials_settings(tmp_path, monkeypatch):
    # A seeded sampler made anew on resume drew its random start-up trials again from the top: after an
    # interruption, the next trials repeated the settings of the first ones, and nothing new was searched.
    from flows import tune_study

    monkeypatch.chdir(tmp_path)
    space = DEFAULT.tune.space("grpo")

    def finish(study, n: int) -> None:
        for _ in range(n):
            trial = study.ask()
            suggest(trial, space)
            trial.set_user_attr(tune_study.STEPS_ATTR, 10)
            study.tell(trial, 0.5)

    assert DEFAULT.tune.startup_trials == 3  # the interruptions fall within the random start-up trials
    study = tune_study.open_study("s-grpo", DEFAULT, print, "fp", fresh=False)
    finish(study, 1)
    for _ in range(2):  # interrupted twice, each time resumed with the redo and one more trial
        suggest(study.ask(), space)  # stays RUNNING
        study = tune_study.open_study("s-grpo", DEFAULT, print, "fp", fresh=False)
        finish(study, 2)
    finish(study, 2)
    finished = [tuple(sorted(r.settings.items())) for r in tune_study.rows(study)]
    assert len(finished) == 7 and len(set(finished)) == 7, finished


STAND_IN = textwrap.dedent(
    """
    import csv, sys, time
    from pathlib import Path
    fields, history = {fields!r}, Path(sys.argv[1])
    rows = []
    for step, value in enumerate([0.1, 0.2, 0.3]):
        rows.append({{"step": step, "val_accuracy": value}})
        tmp = history.with_suffix(".tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(history)  # atomically, as the training stage writes it
        if sys.argv[2] == "wait":  # a slow trial: it trains on until stopped
            time.sleep(600)
    """
).format(fields=M.HISTORY_FIELDS)


def _judged(tmp_path: Path, mode: str, judge) -> tuple:
    from flows import trial

    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    history = tmp_path / "history.csv"
    cmd = [sys.executable, str(script), str(history), mode]
    return trial.run(cmd, {}, history, tmp_path / "trial.log", judge, poll_s=0.05), history


def test_a_trailing_trial_is_stopped_by_optunas_median_pruner(tmp_path):
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    for value in (0.5, 0.6):  # two earlier trials at 0.5 and 0.6 after one step
        study.add_trial(optuna.trial.create_trial(value=value, intermediate_values={1: value}))
    trailing = study.ask()

    def judge(step: int, value: float) -> bool:
        trailing.report(value, step)
        return trailing.should_prune()

    ran, history = _judged(tmp_path, "wait", judge)
    assert ran.pruned_at == 1 and ran.steps == 1 and ran.code != 0  # stopped while it waited to train on
    assert study.trials[-1].intermediate_values == {1: 0.1}


def test_a_trial_that_keeps_up_runs_to_its_end_with_every_point_judged(tmp_path):
    seen: list[tuple[int, float]] = []
    ran, _ = _judged(tmp_path, "run", lambda step, value: seen.append((step, value)) or False)
    assert (ran.code, ran.steps, ran.pruned_at) == (0, 3, None)
    assert seen == [(1, 0.1), (2, 0.2), (3, 0.3)]


def test_the_trial_stage_reads_no_test_split(tmp_path, monkeypatch):
    from flows import tune_study

    monkeypatch.chdir(tmp_path)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    for split in ("train", "val", "test"):
        (prepared / f"{split}.jsonl").write_text(f'{{"split": "{split}"}}\n')
    view = tune_study.data_view(prepared)
    assert sorted(p.name for p in view.iterdir()) == ["train.jsonl", "val.jsonl"]
    assert yaml.safe_load((view / "val.jsonl").read_text()) == {"split": "val"}


def test_a_study_mixes_only_trials_of_the_same_settings_but_grows_with_more_trials(tmp_path, monkeypatch):
    from flows.tune_study import fingerprint

    monkeypatch.chdir(tmp_path)  # no data or reference yet: both "none"
    default = REPO / "params" / "default.yaml"

    def fp(arm: str, **overrides) -> str:
        return fingerprint(load_params(default, overrides), arm)

    assert fp("grpo") == fp("grpo", **{"tune.trials": 20}) == fp("grpo", **{"tune.steps": 150})  # rl.steps: 150
    assert fp("grpo") == fp("grpo", **{"tune.ppo.kl_coef": None})  # another algorithm's space
    assert fp("grpo") != fp("grpo", **{"tune.grpo.lr.high": 2e-3}) and fp("grpo") != fp("rloo")
    assert fp("ppo") != fp("ppo", **{"rl.sampling.max_completion_length": 32})
    before = fp("grpo")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "prepare.json").write_text('{"data_hash": "abc"}')  # the data prepared again
    assert fp("grpo") != before


@pytest.mark.parametrize("name", ["params/x$(id>pwned).yaml", "../default.yaml"])
def test_a_tune_deployment_with_a_hostile_params_file_fails_before_anything_runs(tmp_path, monkeypatch, name):
    from flows.tune import tune

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params").mkdir()
    if "$(" in name:
        (tmp_path / name).write_text("experiment: {seed: 0}\n")  # it exists: refused by its name alone
    state = tune.fn(params_file=name)  # Failed with the error, not raised: Prefect logs no traceback for it
    assert state.is_failed() and re.search("may contain only letters|may not contain '..'", state.message)
    assert not (tmp_path / ".grpoflow").exists() and not (tmp_path / "optuna.db").exists()


def test_the_ablation_tune_option_hands_its_arguments_to_the_tuning_flow(monkeypatch):
    from flows import ablation, tune

    seen: list[list[str]] = []
    monkeypatch.setattr(tune, "main", lambda argv: seen.append(argv) or 0)
    assert ablation.main(["--tune", "--arms", "grpo", "rloo", "--trials", "3", "--set", "tune.steps=5"]) == 0
    assert seen == [
        ["--params", "params/default.yaml", "--arms", "grpo", "rloo", "--trials", "3", "--set", "tune.steps=5"]
    ]


TRAINS = textwrap.dedent(
    """
    import csv, json, sys
    from pathlib import Path
    folder, code = Path(sys.argv[1]), int(sys.argv[2])
    with open(folder / "history.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames={fields!r}, restval="")
        writer.writeheader()
        writer.writerows([{{"step": 0}}, {{"step": 1, "val_accuracy": 0.25}}])
    if code == 0:
        (folder / "metrics.json").write_text(json.dumps({{"val_accuracy": 0.25}}))
    sys.exit(code)
    """
).format(fields=M.HISTORY_FIELDS)


@pytest.mark.parametrize("code, state", [(0, "complete"), (3, "failed"), (1, "crashed")])
def test_a_trials_exit_decides_its_state_and_whether_it_spends_budget(tmp_path, monkeypatch, code, state):
    from flows import tune_study

    monkeypatch.chdir(tmp_path)
    (tmp_path / "trains.py").write_text(TRAINS)
    monkeypatch.setattr(tune_study, "trial_task", tune_study.trial_task.fn)  # the process alone, no Prefect run
    monkeypatch.setattr(
        tune_study, "_command", lambda arm, n, params, folder: [sys.executable, "trains.py", str(folder), str(code)]
    )
    study = tune_study.open_study("s-grpo", DEFAULT, print, "fp", fresh=False)
    space = DEFAULT.tune.space("grpo")
    arm = tune_study.Arm("grpo", study, arm_params(DEFAULT, "grpo"), space, Budget(2, 2), 1, 0, tmp_path, {})
    if state == "crashed":  # a failure every trial would meet: the run stops, no budget spent
        with pytest.raises(tune_study.TrialCrashed, match="failed \\(exit 1\\)"):
            tune_study.one_trial(arm)
        assert tune_study.rows(study) == [] and study.trials[0].state.name == "FAIL"
        return
    row = tune_study.one_trial(arm)  # exit 3: a diagnosed stop (diverged), these settings' outcome: its steps count
    assert (row.state, row.steps, row.value) == (state, 2, 0.25 if code == 0 else None)
    assert set(row.settings) == set(space)
    folder = tmp_path / ".grpoflow" / "tune" / "s-grpo" / "t0"
    assert yaml.safe_load((folder / "params.yaml").read_text())["rl"]["steps"] == 2  # the trial's own set


def test_a_reason_every_end_of_the_space_meets_is_said_once():
    from flows.tune import _grouped

    lines = [
        "rl.engine.lr=1e-05: ppo.critic_warmup_steps=14 leaves none of rl.steps=2",
        "rl.engine.lr=0.001: ppo.critic_warmup_steps=14 leaves none of rl.steps=2",
        "ppo.kl_coef: the range 0.5..0.6 holds no whole number",
    ]
    assert _grouped(lines) == [
        "ppo.critic_warmup_steps=14 leaves none of rl.steps=2 (at rl.engine.lr=1e-05, rl.engine.lr=0.001)",
        "ppo.kl_coef: the range 0.5..0.6 holds no whole number",
    ]
