"""Stage ``ppo``: the PPO baseline (critic + GAE) with GRPO's data, rollout budget and engine.

python -m tasks.ppo --params params/default.yaml
"""

from tasks.rl_stage import cli


def algorithm():
    """The algorithm, loaded once the arguments are parsed: --help needs no torch."""
    from grpoflow.rl.ppo import ALGORITHM

    return ALGORITHM


if __name__ == "__main__":
    cli("ppo", algorithm, __doc__)
