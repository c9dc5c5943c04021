"""The yardsticks of the critic's explained variance (grpoflow.algorithms.ppo.critic_ceiling)."""

from __future__ import annotations

import pytest
import torch

from grpoflow.algorithms.ppo.critic import ValueModel
from grpoflow.algorithms.ppo.critic_ceiling import RewardedBatch, critic_ev, fit_critic, prompt_oracle_ev
from grpoflow.rollout import Rollouts
from tests.unit.test_shared_prefix import small_llama


def _scored(prompts: torch.Tensor, completions: torch.Tensor, rewards: torch.Tensor, g: int) -> RewardedBatch:
    n = len(completions)
    ro = Rollouts(
        prompts,
        torch.ones_like(prompts),
        completions,
        torch.ones_like(completions),
        [""] * n,
        torch.zeros(n, dtype=torch.bool),
    )
    return RewardedBatch(ro, rewards, g)


def test_the_prompt_oracle_by_hand():
    """G = 2, one-token completions, rewards (1, 0 | 1, 1): returns mean 3/4, variance 3/16.
    In-sample values (1/2, 1/2 | 1, 1) leave residual variance 1/8: EV 1/3. Leave-one-out values
    (0, 1 | 1, 1) leave residuals (1, -1, 0, 0), variance 1/2: EV 1 - 8/3 = -5/3."""
    b = _scored(
        torch.zeros(4, 2, dtype=torch.long), torch.ones(4, 1, dtype=torch.long), torch.tensor([1.0, 0, 1, 1]), 2
    )
    ev = prompt_oracle_ev([b])
    assert ev["in_sample"] == pytest.approx(1 / 3, abs=1e-6)
    assert ev["leave_one_out"] == pytest.approx(-5 / 3, abs=1e-6)


def test_a_fitted_critic_reads_what_decides_the_reward():
    """The reward is 1 exactly when the completion's first token is 5: before fitting the zero head
    explains nothing; fitted, the values from the second completion position on explain most of it."""
    trunk = small_llama(lora=False, head_dim=8, vocab=16).model  # hidden 32
    critic = ValueModel(trunk, 32)
    g = torch.Generator().manual_seed(0)

    def batch() -> RewardedBatch:
        prompts = torch.randint(0, 4, (8, 1), generator=g).repeat_interleave(4, 0)
        first = torch.where(torch.rand(32, generator=g) < 0.5, 5, 6)
        completions = torch.stack([first, torch.randint(7, 9, (32,), generator=g), torch.full((32,), 9)], 1)
        return _scored(prompts, completions, (first == 5).float(), 4)

    train, held = [batch() for _ in range(8)], [batch() for _ in range(2)]
    assert abs(critic_ev(critic, held)["ev"]) < 1e-6
    history = fit_critic(critic, train, held, epochs=6, lr=3e-3, positions=(0, 1, 2))
    assert history[-1]["ev@1"] > 0.8 and history[-1]["ev@2"] > 0.8
    assert history[-1]["ev@0"] < 0.2  # before the deciding token nothing tells the samples apart
