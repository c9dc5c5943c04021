"""One trial of ``make tune`` (flows/tune.py starts it): an arm's algorithm trained from the SFT
reference with the trial's settings for the trial's steps, scored on the validation split alone
(its history's val accuracy, which the flow follows for the pruner). It reads ``--data``, a view of
the prepared data that holds the train and val splits only, so the test split cannot be read.

Its MLflow run is ``tune/<arm>/t<trial>``, a child of the tuning parent the flow opens
(GRPOFLOW_PARENT_RUN_ID), with the arm and trial as params beside the set's.

    python -m tasks.tune_trial --params .grpoflow/tune/<study>/t0/params.yaml --arm grpo --trial 0 \\
        --data .grpoflow/tune/data --out ... --checkpoints ... --metrics ... --history ... --seed 1000
"""

from __future__ import annotations

import argparse

from grpoflow.config import Params
from tasks.cli import command_parser, run_stage_cli

STAGE = "tune_trial"


def run_name(arm: str, trial: int) -> str:
    """The trial's MLflow run name."""
    return f"tune/{arm}/t{trial}"


def parser() -> argparse.ArgumentParser:
    """The trial's arguments: the set (the trial's own file), the arm and trial, and its paths."""
    p = command_parser(f"tasks.{STAGE}", __doc__)
    p.add_argument("--params", required=True, help="the trial's set: the arm's, with its settings and steps")
    p.add_argument("--arm", required=True, help="the arm (its algorithm trains)")
    p.add_argument("--trial", type=int, required=True, help="the Optuna trial's number")
    p.add_argument("--seed", type=int, required=True, help="the training seed (tune.train_seed)")
    for flag, what in (
        ("data", "a folder with train.jsonl and val.jsonl (no test split)"),
        ("reference", "the SFT reference, the policy's starting point"),
        ("out", "where the trained policy goes (the flow deletes it)"),
        ("checkpoints", "the trial's checkpoints"),
        ("metrics", "the trial's metrics JSON (val_accuracy: its score)"),
        ("history", "the per-step CSV the flow follows"),
    ):
        p.add_argument(f"--{flag}", required=True, help=what)
    return p


def main(args: argparse.Namespace, params: Params) -> None:
    from grpoflow.rl.algorithm import ALGORITHMS
    from tasks import rl_stage

    hooks = rl_stage.ArmHooks(
        stage=STAGE,
        run_name=run_name(args.arm, args.trial),
        params={"arm": args.arm, "tune_trial": args.trial},
        scores=lambda rl_run: {},  # a trial is scored on val alone: its history and metrics hold it
    )
    rl_stage.run(args, params, ALGORITHMS[params.ablation.arm(args.arm).algorithm], arm=hooks)


if __name__ == "__main__":
    run_stage_cli(parser(), main)
