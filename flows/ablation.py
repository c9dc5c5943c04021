"""The GRPO-vs-PPO ablation as a Prefect flow: both algorithms on the same prepared data and SFT
reference (DVC reuses whatever is cached), then evaluation and the comparison report, published
as a Prefect table artifact. In MLflow the run is one parent with ``grpo`` and ``ppo`` children
that carry identical metric names and an ``algorithm`` param: select both to compare them.

``--seeds 1 2`` adds training runs of both algorithms with those training seeds (same data and
reference; outside DVC's cache, under ``models/seeds/``), evaluates them, and reports the mean
and spread of test pass@1 over all seeds, the pipeline's own seed included.

    python -m flows.ablation --params params/default.yaml [--seeds 1 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows import serve
from tasks.cli import help_text
from flows.pipeline import (EXIT_INTERRUPTED, INTERRUPTED, held_workspace, parse_overrides, precheck, run_stage_cli,
                            run_stages)
from grpoflow.compare import seed_spread, seed_verdict
from grpoflow.config import ConfigError
from grpoflow.io import write_json
from tasks.stages import STAGES as DECLARED_STAGES

ABLATION_STAGES = [s.name for s in DECLARED_STAGES]  # the whole pipeline: both algorithms, evaluate, compare
ALGORITHMS = ("grpo", "ppo")


def _seed_runs(params_file: str, seeds: list[int], env: dict[str, str]) -> dict:
    models = ["sft=models/sft"]
    for seed in seeds:
        for algo in ALGORITHMS:
            name = f"{algo}-seed{seed}"
            run_stage_cli(name, [f"tasks.{algo}", "--params", params_file, "--seed", str(seed),
                                 "--out", f"models/seeds/{name}", "--checkpoints", f"checkpoints/seeds/{name}",
                                 "--metrics", f"metrics/seeds/{name}.json", "--history", f"metrics/seeds/{name}_history.csv"], env)
            models.append(f"{name}=models/seeds/{name}")
    run_stage_cli("evaluate-seeds", ["tasks.evaluate", "--params", params_file, "--models", *models,
                                     "--out", "data/evaluation/seeds", "--metrics", "metrics/seeds/evaluate.json"], env)
    return json.loads(Path("metrics/seeds/evaluate.json").read_text())["models"]


@flow(name="grpoflow-ablation", log_prints=True)
def ablation(params_file: str = "params/default.yaml", seeds: list[int] | None = None,
             overrides: dict[str, Any] | None = None) -> dict:
    """GRPO vs PPO on one parameter set (with validated ``overrides``), over ``seeds``."""
    precheck(params_file, overrides)
    with held_workspace(params_file, overrides) as params:
        return _ablation(params, params_file, seeds, overrides)


def _ablation(params, params_file: str, seeds: list[int] | None, overrides: dict[str, Any] | None) -> dict:
    extra_seeds = [s for s in (seeds or []) if s != params.experiment.seed]
    seed_results: dict = {}
    run_stages(params, params_file, ABLATION_STAGES, overrides=overrides,
               extra=(lambda env: seed_results.update(_seed_runs(params_file, extra_seeds, env))) if extra_seeds else None)
    result = json.loads(Path("metrics/compare.json").read_text())
    table = json.loads(Path("reports/compare/table.json").read_text())
    create_table_artifact(table, key="grpo-vs-ppo", description="GRPO vs PPO on the same data, reference and budget")
    if extra_seeds:
        base = json.loads(Path("metrics/evaluate.json").read_text())["models"]
        scores = {a: [base[a]["test"]["pass@1"]] + [seed_results[f"{a}-seed{s}"]["test"]["pass@1"] for s in extra_seeds]
                  for a in ALGORITHMS}
        spread = seed_spread(scores)
        result["seeds"] = {"seeds": [params.experiment.seed, *extra_seeds], "test_pass@1": spread, "winner": seed_verdict(spread)}
        write_json("metrics/ablation_seeds.json", result["seeds"])
        rows = "\n".join(f"| {a} | {s['mean']:.4f} | {s['std']:.4f} | {s['min']:.4f} | {s['max']:.4f} | {s['seeds']} |" for a, s in spread.items())
        create_markdown_artifact(f"# GRPO vs PPO over seeds\n\nWinner on test pass@1: **{result['seeds']['winner']}**\n\n"
                                 f"| algorithm | mean | std | min | max | seeds |\n|---|---|---|---|---|---|\n{rows}\n",
                                 key="grpo-vs-ppo-seeds", description="test pass@1 over training seeds")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.ablation", description=help_text(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument("--seeds", type=int, nargs="*", default=None, help="extra training seeds for mean and spread")
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override a parameter for this run (validated), e.g. rl.steps=20")
    args = parser.parse_args(argv)
    try:
        overrides = parse_overrides(args.overrides)
        precheck(args.params, overrides)
        with serve.prefect_api():
            result = ablation(params_file=args.params, seeds=args.seeds, overrides=overrides or None)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"winner on test pass@1: {result['winner_on_test_pass@1']}; peak memory GRPO/PPO "
          f"{result['memory']['grpo_over_ppo']:.3f}")
    if "seeds" in result:
        spread = result["seeds"]["test_pass@1"]
        print(f"over seeds {result['seeds']['seeds']}: " + ", ".join(
            f"{a} {s['mean']:.3f} ± {s['std']:.3f}" for a, s in spread.items()) + f"; winner: {result['seeds']['winner']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
