"""Stage ``ppo``: the PPO baseline (critic + GAE) with GRPO's data, rollout budget and engine.

    python -m tasks.ppo --params params/default.yaml
"""

from grpoflow.ppo import ALGORITHM
from tasks.rl_stage import cli

if __name__ == "__main__":
    cli(ALGORITHM, __doc__)
