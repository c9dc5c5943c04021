"""Tuning each ablation arm's own settings before the seeded comparison, as a Prefect flow: Optuna
searches the arm's space on the validation split only, on the same budget of training steps per
arm, and the best settings become the arm's overlay, params/tuned/<set>-<arm>.yaml, which
``make ablation`` applies.

- The space is the arm's algorithm's (``tune.grpo``: learning rate, beta, G, temperature;
  ``tune.ppo``: actor and critic learning rates, the lambdas, the value clip, the critic's warm-up,
  the KL weight), searched by a seeded TPE sampler.
- Each trial trains the arm from the SFT reference for ``tune.steps`` steps (tasks/tune_trial.py)
  on a view of the prepared data with the train and val splits only; its score is its greedy val
  accuracy at the last step. A median pruner stops a trial whose val accuracy trails.
- The budget is ``tune.trials`` x ``tune.steps`` training steps per arm, counted in steps: what a
  pruned trial did not spend goes to further trials (grpoflow/tuning/budget.py).
- The study lives in optuna.db beside MLflow's mlflow.db, named <set>-<arm>: running again resumes
  it (finished trials stay, an interrupted one is redone with its settings; a higher ``--trials``
  adds trials). Changed settings, data or reference refuse to mix with it: ``--fresh`` starts over.
- MLflow: a parent run per arm (tune/<set>-<arm>) with a child per trial (tune/<arm>/t<n>); the
  shared stages come from DVC as in the ablation. The report is reports/tune.md.

    python -m flows.tune --params params/default.yaml --arms grpo ppo --trials 8
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prefect import State, flow
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from flows import serve, summary, tune_study
from flows.dag import run_order
from flows.kept_outputs import kept_outputs
from flows.pipeline import INTERRUPTED, cli_exit, hear_interrupts, held_workspace, parse_overrides, precheck
from flows.rehearse import add_smoke, rehearse
from flows.run_report import StageResult
from flows.stage_run import StageFailed, expected_failures_as_state, run_dvc_stage
from grpoflow import catalog
from grpoflow.config import ConfigError, Params, arm_params, load_params
from grpoflow.io import atomic_write
from grpoflow.tuning import report
from grpoflow.tuning.overlay import beside_path, overlay_budget, overlay_path, overlay_text
from grpoflow.tuning.space import space_problems
from tasks.cli import add_overrides, command_parser
from tasks.stages import SHARED_STAGES

if TYPE_CHECKING:
    from grpoflow.tuning.report import ArmTuning

REPORT = Path("reports/tune.md")


def tune_overrides(trials: int | None, overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The run's overrides: the user's, the trials per arm, and the shared stages (DVC runs them)."""
    return {**(overrides or {}), **({"tune.trials": trials} if trials else {}), "experiment.stages": SHARED_STAGES}


def check_spaces(params: Params, arms: list[str]) -> None:
    """Every arm's space gives valid sets at its ends (checked before any trial trains), else
    :class:`ConfigError` naming each bad end."""
    problems = []
    budget, every = tune_study.trial_budget(params)
    for arm in arms:
        tune_study.check_arm(params, arm)
        algorithm = params.ablation.arm(arm).algorithm
        space = params.tune.space(algorithm)
        found = space_problems(arm_params(params, arm), algorithm, space, budget.steps, every)
        problems += [f"  - arm {arm}: {p}" for p in _grouped(found)]
    if problems:
        raise ConfigError(
            "the search space gives sets the schema refuses (tune.grpo / tune.ppo):\n" + "\n".join(problems)
        )


def _grouped(problems: list[str]) -> list[str]:
    """``key=value: reason`` lines that share their reason as one line naming every end that meets it (a set
    whose own value is refused fails at every end of every range alike)."""
    ends: dict[str, list[str]] = {}
    for line in problems:
        where, _, reason = line.partition(": ")
        ends.setdefault(reason, []).append(where)
    return [
        f"{reason} (at {', '.join(where)})" if len(where) > 1 else f"{where[0]}: {reason}"
        for reason, where in ends.items()
    ]


def _shared_stages(params: Params) -> None:
    """The stages every arm starts from, through DVC (cached when nothing changed)."""
    orch = params.orchestration
    stage_task = run_dvc_stage.with_options(retries=orch.stage_retries, retry_delay_seconds=orch.retry_delay_seconds)
    for stage in run_order(params):
        with kept_outputs(stage):
            result = cast(StageResult, stage_task(stage, {}, retries=orch.stage_retries, return_state=True).result())
        print(f"{result.stage}: {'ran' if result.ran else 'cached'} in {result.seconds:.1f} s")


def write_overlay(params_file: str, arm: ArmTuning, replace: bool = False) -> tuple[str | None, str | None]:
    """The arm's best settings as its overlay file (none without a complete trial): where they went, and a
    line when that is beside the overlay. An overlay tuned on a larger budget (or on one it does not state)
    is kept, unless ``replace``: a smoke-sized tune must not overwrite what a real one found."""
    best = arm.best
    if best is None:
        return None, None
    path, note = overlay_path(params_file, arm.arm), None
    kept = overlay_budget(path) if path.is_file() and not replace else None
    if path.is_file() and not replace and (kept is None or arm.budget.total < kept):
        target = beside_path(params_file, arm.arm, arm.budget.total)
        was = f"{kept} training steps" if kept is not None else "a budget it does not state"
        note = (
            f"{path} kept (tuned on {was}, this tune on {arm.budget.total}): the best settings are in {target}; "
            "--write-overlay (make tune WRITE_OVERLAY=1) replaces the overlay"
        )
        path = target
    header = [
        f"Tuned settings of arm {arm.arm} for {params_file}: written by `make tune` (flows/tune.py); "
        "`make ablation` applies them.",
        f"Optuna study {arm.study} in {tune_study.OPTUNA_DB}: best of {len(arm.trials)} trials (trial "
        f"{best.number}), val accuracy {best.value:.4f}; budget {arm.budget.trials} x {arm.budget.steps} = "
        f"{arm.budget.total} training steps.",
    ]
    record = {
        "study": arm.study,
        "trials": len(arm.trials),
        "best_trial": best.number,
        "val_accuracy": round(float(best.value or 0.0), 4),
        "trial_steps": arm.budget.steps,
        "budget_steps": arm.budget.total,
    }
    with atomic_write(path) as fh:
        fh.write(overlay_text(best.settings, header, record))
    return str(path), note


def _publish(params: Params, params_file: str, arms: list[ArmTuning], parents: dict[str, str]) -> str:
    """The report (reports/tune.md), on each arm's MLflow parent and as a Prefect artifact."""
    import mlflow

    text = report.markdown(arms, params_file, params.tune.train_seed, tune_study.SAMPLER)
    with atomic_write(REPORT) as fh:
        fh.write(text)
    client = mlflow.MlflowClient()
    for run_id in parents.values():
        client.log_artifact(run_id, str(REPORT))
    create_markdown_artifact(text, key="tuning-report", description="Each arm's search, budget and best settings")
    return text


@flow(name="grpoflow-tune", log_prints=True)
@expected_failures_as_state
def tune(
    params_file: str = "params/default.yaml",
    arms: list[str] | None = None,
    trials: int | None = None,
    overrides: dict[str, Any] | None = None,
    fresh: bool = False,
    replace_overlay: bool = False,
) -> dict | State:
    """Tune ``arms`` (default: every algorithm of grpoflow.catalog) of one parameter set, ``trials``
    each (default ``tune.trials``);
    each arm's best settings replace its overlay when this tune's budget is at least the overlay's, or
    ``replace_overlay``, and go beside it otherwise."""
    arms = arms or catalog.default_run()  # an opt-in algorithm is tuned only where named
    every = tune_overrides(trials, overrides)
    precheck(params_file, every)
    check_spaces(load_params(params_file, every), arms)
    with held_workspace(params_file, every) as params:
        _shared_stages(params)
        view = tune_study.data_view()
        results, parents = [], {}
        for arm in arms:
            start = time.perf_counter()
            tuned, parents[arm] = tune_study.tune_arm(params, params_file, arm, view, fresh, str(flow_run.id or "none"))
            overlay, note = write_overlay(params_file, tuned, replace_overlay)
            if note:
                print(note)
            results.append(dataclasses.replace(tuned, overlay=overlay, seconds=time.perf_counter() - start))
        _publish(params, params_file, results, parents)
    return {
        a.arm: {
            "study": a.study,
            "best_val_accuracy": a.best.value if a.best else None,
            "settings": a.best.settings if a.best else None,
            "overlay": a.overlay,
            "trials": len(a.trials),
            "budget_steps": a.budget.total,
            "steps_spent": a.spent,
        }
        for a in results
    }


def study_fingerprint_note(kept: str | None = None) -> str:
    """Where the studies live, for the closing lines; ``kept``: where a smoke tune's results are kept (its
    scratch copy, studies and overlays included, is deleted once it ends)."""
    if kept:
        return (
            f"studies and overlays: the smoke run's scratch copy's, deleted with it; report and trial logs kept "
            f"in {kept}"
        )
    return f"studies in {tune_study.OPTUNA_DB} (resumed by the same command), report in {REPORT}"


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("flows.tune", __doc__)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument("--arms", nargs="+", default=catalog.default_run(), metavar="ARM", help="the arms to tune")
    parser.add_argument("--trials", type=int, default=None, help="trials per arm (default: the set's tune.trials)")
    parser.add_argument("--fresh", action="store_true", help="delete the arms' studies and start them over")
    parser.add_argument(
        "--write-overlay",
        dest="replace_overlay",
        action="store_true",
        help="replace each arm's overlay even when it was tuned on a larger budget (else the best settings go "
        "beside it)",
    )
    add_overrides(parser, "tune.steps=40")
    add_smoke(parser, "the arms' overlays here", "flows.tune")
    args = parser.parse_args(argv)
    hear_interrupts()
    try:
        overrides = parse_overrides(args.overrides)
        if args.smoke:  # the arms' names checked before the scratch copy is made; their spaces at smoke size, in it
            params = load_params(args.params, overrides)
            for arm in args.arms:
                tune_study.check_arm(params, arm)
            flow = ("flows.tune", "--arms", *args.arms, *(["--trials", str(args.trials)] if args.trials else []))
            return rehearse(args.params, overrides or None, None, flow=flow)
        every = tune_overrides(args.trials, overrides)
        precheck(args.params, every)
        check_spaces(load_params(args.params, every), args.arms)
        with serve.prefect_api():
            result = cast(
                dict,
                tune(
                    params_file=args.params,
                    arms=args.arms,
                    trials=args.trials,
                    overrides=overrides or None,
                    fresh=args.fresh,
                    replace_overlay=args.replace_overlay,
                ),
            )
    except (ConfigError, StageFailed, tune_study.TrialCrashed, KeyboardInterrupt) as exc:
        return cli_exit(exc, INTERRUPTED.replace("training resumes from its last checkpoint", "the studies resume"))
    kept = summary.smoke_kept_in()  # a smoke tune: this workspace is a scratch copy
    for arm, r in result.items():
        best = (
            "no complete trial" if r["best_val_accuracy"] is None else f"best val accuracy {r['best_val_accuracy']:.3f}"
        )
        print(
            f"{arm:>14}: {best} in {r['trials']} trials, {r['steps_spent']} of {r['budget_steps']} steps"
            + (f"; overlay {r['overlay']}" + (" (the scratch copy's)" if kept else "") if r["overlay"] else "")
        )
    print(study_fingerprint_note(kept))
    print(summary.where_text(args.params, REPORT).replace("Run page", "Report"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
