"""Stage ``<algorithm>``: any algorithm of grpoflow.catalog, trained like the grpo and ppo stages
(from the SFT reference, on DeepSpeed, resumable); the stage of an algorithm without a CLI of its own.

python -m tasks.train --algorithm NAME --params params/default.yaml
"""

import argparse

from grpoflow import catalog
from tasks.cli import stage_parser
from tasks.rl_stage import cli

if __name__ == "__main__":
    # The algorithm first: the paths default to its stage's (its declaration in tasks/stages.py).
    first = argparse.ArgumentParser(prog="python -m tasks.train", add_help=False)
    first.add_argument("--algorithm", choices=catalog.names())  # an unknown name: argparse lists the known
    name = first.parse_known_args()[0].algorithm or catalog.default()  # --help alone: the default's paths
    parser = stage_parser(name, __doc__, module="tasks.train")
    parser.add_argument("--algorithm", required=True, choices=catalog.names(), help="the catalog's name")
    cli(name, __doc__, parser)
