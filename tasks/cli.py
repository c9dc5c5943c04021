"""What every stage CLI shares: the argument parser and clear exits on bad configuration."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from grpoflow.config import ConfigError, Params, load_params

# Exit codes the flow reads: neither is worth a retry, the same inputs give the same answer.
EXIT_BAD_INPUT = 2  # the configuration or data is wrong: fix it
EXIT_VERDICT = 3  # a gate said no (leakage, verifier gate), or training stopped with a diagnosis


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m tasks.{stage}", description=description)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument("--metrics", default=f"metrics/{stage}.json", help="where to write the stage's metrics JSON")
    return parser


def run_stage_cli(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace, Params], None]) -> None:
    """Parse, validate params, run ``body``; a configuration error exits 2 with its message only."""
    args = parser.parse_args()
    try:
        params = load_params(args.params)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    body(args, params)
