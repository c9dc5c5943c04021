"""The GRPO-vs-PPO ablation as a Prefect flow: both algorithms on the same prepared data and SFT
reference (DVC reuses whatever is cached), then evaluation and the comparison report, published
as a Prefect table artifact. In MLflow the run is one parent with ``grpo`` and ``ppo`` children
that carry identical metric names and an ``algorithm`` tag: select both to compare them.

    python -m flows.ablation --params params/default.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_table_artifact

from flows.pipeline import _check_params_file, pipeline
from grpoflow.config import ConfigError

ABLATION_STAGES = ["prepare", "validate_verifiers", "sft", "grpo", "ppo", "evaluate", "compare"]


@flow(name="grpoflow-ablation", log_prints=True)
def ablation(params_file: str = "params/default.yaml") -> dict:
    pipeline(params_file=params_file, stages=ABLATION_STAGES)
    table = json.loads(Path("reports/compare/table.json").read_text())
    create_table_artifact(table, key="grpo-vs-ppo", description="GRPO vs PPO on the same data, reference and budget")
    return json.loads(Path("metrics/compare.json").read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.ablation", description=__doc__)
    parser.add_argument("--params", default="params/default.yaml")
    args = parser.parse_args(argv)
    try:
        _check_params_file(args.params)
        result = ablation(params_file=args.params)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"winner on test pass@1: {result['winner_on_test_pass@1']}; peak memory GRPO/PPO "
          f"{result['memory']['grpo_over_ppo']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
