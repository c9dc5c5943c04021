
import pytest
import torch

from grpoflow.ppo import explained_variance, token_rewards


def test_token_rewards_put_the_reward_on_the_last_token_and_subtract_kl():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    r = token_rewards(torch.tensor([1.0, 0.5]), mask, None, 0.0)
    assert r.tolist() == [[0, 0, 1, 0], [0.5, 0, 0, 0]]
    kl = torch.full_like(mask, 0.5)
    r = token_rewards(torch.tensor([1.0, 0.5]), mask, kl, 0.1)
    assert torch.allclose(r, torch.tensor([[-0.05, -0.05, 0.95, 0.0], [0.45, 0, 0, 0]]))


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns.clone(), returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)
