"""Stage ``ppo``: the PPO baseline (critic + GAE) with GRPO's data, rollout budget and engine.

python -m tasks.ppo --params params/default.yaml
"""

from tasks.rl_stage import cli

if __name__ == "__main__":
    cli("ppo", __doc__)
