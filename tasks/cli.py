"""What every stage CLI shares: the argument parser and clear exits on bad configuration."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Callable

from grpoflow.config import ConfigError, Params, load_params

# Exit codes the flow reads: neither is worth a retry, the same inputs give the same answer.
EXIT_BAD_INPUT = 2  # the configuration or data is wrong: fix it
EXIT_VERDICT = 3  # a gate said no (leakage, verifier gate), or training stopped with a diagnosis
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports it


def stage_parser(stage: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m tasks.{stage}", description=description)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    parser.add_argument("--metrics", default=f"metrics/{stage}.json", help="where to write the stage's metrics JSON")
    return parser


def run_stage_cli(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace, Params], None]) -> None:
    """Parse, validate params, run ``body``; a configuration error exits 2 and a Ctrl-C 130, each
    with one line (the flow shows the stage's output: a traceback there would bury the reason)."""
    args = parser.parse_args()
    try:
        params = load_params(args.params)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    try:
        body(args, params)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        print(f"{parser.prog}: interrupted; stopped before the end (checkpoints already written are kept and "
              "resumed from)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED) from None
