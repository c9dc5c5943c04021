"""The ablation as a Prefect flow: named arms, each a set of overrides on the same prepared data,
SFT reference and budget (grpoflow.config.ARMS: grpo, ppo, dr_grpo, rloo, reinforce_pp, dapo; or
a set's own ablation.custom_arms), each trained at every seed.

Each (arm, seed) is a DVC stage of its own (tasks/stages.py, arm_stage), so a re-run with one
more seed trains only that seed. The ablation_report stage then gives, per arm, the mean, std and
95% interval of test pass@1, seconds per step, peak memory, final KL and held-out loss increase;
each arm's verdicts against the first by Welch's t-test, on test pass@1 and on forgetting; one plot
of every arm's curves. In MLflow the run is one parent with a child per arm and seed
(arm/<arm>/s<seed>), all with the same metric names and the arm as a param: select them and press
Compare.

An arm tuned by ``make tune`` (flows/tune.py) trains with its overlay, params/tuned/<set>-<arm>.yaml,
applied after the arm's own overrides (``--untuned``: the set's settings); each arm's line says which.
``--tune`` tunes the arms instead (flows.tune, ``--trials`` per arm).

    python -m flows.ablation --params params/default.yaml --arms grpo ppo rloo dapo --seeds 0 1 2
    python -m flows.ablation --tune --arms grpo ppo --trials 8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, cast

from prefect import State, flow
from prefect.artifacts import create_table_artifact

from flows import serve, summary
from flows.pipeline import (
    checked_params_file,
    cli_exit,
    hear_interrupts,
    held_workspace,
    parse_overrides,
    precheck,
    run_stages,
)
from flows.rehearse import add_smoke, rehearse
from flows.stage_run import StageFailed, expected_failures_as_state
from grpoflow import catalog
from grpoflow.config import ARMS, AblationConfig, ConfigError, load_params
from grpoflow.tuning.overlay import overlay_budget, overlay_path, read_overlay, shown, tuned_arm_overrides
from tasks.cli import add_overrides, command_parser
from tasks.stages import ABLATION_METRICS, ABLATION_OUT, SHARED_STAGES


def ablation_overrides(arms: list[str], seeds: list[int], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The run's overrides: the user's, then the arms, the seeds, and the shared stages."""
    return {
        **(overrides or {}),
        "ablation.arms": list(arms),
        "ablation.seeds": list(seeds),
        "experiment.stages": SHARED_STAGES,
    }


def with_tuned(params_file: str, arms: list[str], every: dict[str, Any], tuned: bool = True) -> tuple[dict, list[str]]:
    """``every`` with each arm's tuned overlay (params/tuned/<set>-<arm>.yaml) applied where one
    exists and ``tuned``; and a line per arm saying which settings it trains with."""
    params = load_params(checked_params_file(params_file), every)  # its name checked before it is read
    found: dict[str, dict[str, Any]] = {}
    lines = []
    for arm in arms:
        path = overlay_path(params_file, arm)
        if tuned and path.is_file():
            found[arm] = read_overlay(path)
            budget = overlay_budget(path)
            tuned_on = f"tuned on {budget} training steps" if budget is not None else "its tuning budget not stated"
            lines.append(f"arm {arm}: tuned settings from {path} ({tuned_on}): {shown(found[arm])}")
        else:
            why = f"{path} ignored (--untuned)" if path.is_file() else f"no {path}"
            lines.append(f"arm {arm}: the set's own settings ({why})")
    return {**every, **tuned_arm_overrides(params, found)}, lines


@flow(name="grpoflow-ablation", log_prints=True)
@expected_failures_as_state
def ablation(
    params_file: str = "params/default.yaml",
    arms: list[str] | None = None,
    seeds: list[int] | None = None,
    overrides: dict[str, Any] | None = None,
    tuned: bool = True,
) -> dict | State:
    """Arms ``arms`` (the first the baseline) at ``seeds`` on one parameter set, with validated
    ``overrides``; each tuned arm with its overlay unless ``tuned`` is false."""
    arms = arms or catalog.default_run()  # an opt-in algorithm is an arm only where named
    every, lines = with_tuned(params_file, arms, ablation_overrides(arms, seeds or [0], overrides), tuned)
    for line in lines:
        print(line)
    precheck(params_file, every)
    with held_workspace(params_file, every) as params:
        results = run_stages(params, params_file, None, overrides=every)
        for r in results:
            print(f"{r.stage}: {'ran' if r.ran else 'cached'} in {r.seconds:.1f} s")
        result = json.loads(Path(ABLATION_METRICS).read_text())
        create_table_artifact(
            json.loads((Path(ABLATION_OUT) / "table.json").read_text()),
            key="ablation-arms",
            description=f"The arms over seeds {params.ablation.seeds}, against {result['baseline']}",
        )
        return result


def check_flags(params_file: str, arms: list[str], seeds: list[int], overrides: dict[str, Any] | None) -> None:
    """``--arms`` and ``--seeds`` judged on their own (against the set's custom arms), so that a mistake
    in them is blamed on the command line: through the run's overrides it read as the params file's."""
    from pydantic import ValidationError

    custom = load_params(params_file, overrides).ablation.custom_arms  # the set's own faults are the file's
    try:
        AblationConfig(arms=arms, seeds=seeds, custom_arms=custom)
    except ValidationError as exc:
        flags = f"--arms {' '.join(arms)} --seeds {' '.join(map(str, seeds))}"
        problems = (e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError("; ".join(f"{flags}: {problem}" for problem in problems)) from None


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("flows.ablation", __doc__)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument(
        "--arms",
        nargs="+",
        default=catalog.default_run(),
        metavar="ARM",
        help=(
            f"the arms, the first the baseline (default: {' '.join(catalog.default_run())}; known: {' '.join(ARMS)}; "
            "or the set's ablation.custom_arms, README: Ablation)"
        ),
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds of every arm (default: 0)")
    add_overrides(parser)
    parser.add_argument("--untuned", action="store_true", help="ignore the arms' tuned overlays (params/tuned/)")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="tune the arms instead (flows.tune), --trials each; with --smoke, kept where flows.tune --smoke keeps it",
    )
    parser.add_argument("--trials", type=int, default=None, help="with --tune: trials per arm (default: tune.trials)")
    add_smoke(parser, "params/tuned/", "flows.ablation")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    hear_interrupts()
    if args.tune:
        from flows import tune

        trials = ["--trials", str(args.trials)] if args.trials else []
        smoke = ["--smoke"] if args.smoke else []
        return tune.main(["--params", args.params, "--arms", *args.arms, *trials, *smoke, "--set", *args.overrides])
    try:
        overrides = parse_overrides(args.overrides)
        check_flags(args.params, args.arms, args.seeds, overrides)
        every = ablation_overrides(args.arms, args.seeds, overrides)
        # The arms and seeds validated here, smoke or not: a bad arm is refused before a scratch copy is made.
        every, _ = with_tuned(args.params, args.arms, every, tuned=not args.untuned)  # the flow prints the lines
        if args.smoke:
            flow = ("flows.ablation", "--arms", *args.arms, "--seeds", *map(str, args.seeds))
            return rehearse(
                args.params, overrides or None, None, flow=(*flow, *(["--untuned"] if args.untuned else []))
            )
        precheck(args.params, every)
        with serve.prefect_api():
            # A Failed state the flow returns comes back raised, as its exception.
            result = cast(
                dict,
                ablation(
                    params_file=args.params,
                    arms=args.arms,
                    seeds=args.seeds,
                    overrides=overrides or None,
                    tuned=not args.untuned,
                ),
            )
    except (ConfigError, StageFailed, KeyboardInterrupt) as exc:  # a verdict's report is in the log above
        return cli_exit(exc)
    for arm in result["order"]:
        score, verdict = result["arms"][arm]["test_pass@1"], result["verdicts"].get(arm)
        line = f"{arm:>14}: test pass@1 {score['mean']:.3f}"
        if score["std"] is not None:
            line += f" ± {score['std']:.3f}"
        line += f" over {score['n']} seed(s)"
        if verdict is None:
            line += " (baseline)"
        elif verdict["verdict"] in ("better", "worse"):
            line += f"; {verdict['verdict']} than {result['baseline']}"
        else:
            line += f"; {verdict['verdict']} with {result['baseline']}"
        forgetting = result.get("forgetting_verdicts", {}).get(arm)
        if forgetting and forgetting["verdict"] in ("better", "worse"):
            line += f"; forgets {'less' if forgetting['verdict'] == 'better' else 'more'} than {result['baseline']}"
        print(line)
    print(summary.where_text(args.params), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
