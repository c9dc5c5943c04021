"""Stage ``<algorithm>``: an algorithm of grpoflow.catalog that a default run trains, trained like
the grpo and ppo stages (from the SFT reference, on DeepSpeed, resumable); the stage of an algorithm
without a CLI of its own. An opt-in algorithm has no stage: it trains as an ablation arm (tasks/arm.py).

python -m tasks.train --algorithm NAME --params params/default.yaml
"""

import argparse

from grpoflow import catalog
from tasks.cli import stage_parser
from tasks.rl_stage import cli

if __name__ == "__main__":
    # The algorithm first: the paths default to its stage's (its declaration in tasks/stages.py).
    first = argparse.ArgumentParser(prog="python -m tasks.train", add_help=False)
    staged = catalog.default_run()  # the algorithms with a stage in dvc.yaml
    first.add_argument("--algorithm", choices=staged)  # an unknown name: argparse lists the known
    name = first.parse_known_args()[0].algorithm or catalog.default()  # --help alone: the default's paths
    parser = stage_parser(name, __doc__, module="tasks.train")
    parser.add_argument("--algorithm", required=True, choices=staged, help="the catalog's name")
    cli(name, __doc__, parser)
