from math import comb

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.compare import memory_breakdown, model_state_mb, stability, winner
from grpoflow.evaluation import majority_answer, pass_at_k
from grpoflow.ppo import explained_variance, token_rewards


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_the_combinatorial_formula(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_hand_values_and_errors():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_majority_vote():
    assert majority_answer(["3", "4", "3", None]) == "3"
    assert majority_answer(["4", "3"]) == "4"  # tie: first seen
    assert majority_answer([None, ""]) is None


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


def test_memory_breakdown_attributes_the_critic_state():
    m = memory_breakdown({"peak_memory_mb": 1000.0}, {"peak_memory_mb": 1100.0}, critic_parameters=2**20)
    assert m["critic_model_state_mb"] == model_state_mb(2**20) == 16.0
    assert m["difference_mb"] == 100.0 and m["other_mb"] == 84.0
    assert m["grpo_over_ppo"] == pytest.approx(1000 / 1100)


def test_winner_and_stability():
    assert winner({"test_pass@1": 0.5}, {"test_pass@1": 0.4}) == "grpo"
    assert winner({"test_pass@1": 0.4}, {"test_pass@1": 0.4}) == "tie"
    assert winner({}, {"test_pass@1": 0.4}) == "undecided"
    rows = [{"reward_mean": str(v)} for v in (0, 0, 1, 1)]
    assert stability(rows, "reward_mean", window=2) == 0.0 and stability(rows, "reward_mean", window=4) == 0.5


def test_seed_spread_and_verdict():
    from grpoflow.compare import seed_spread, seed_verdict

    spread = seed_spread({"grpo": [0.4, 0.5], "ppo": [0.30, 0.32]})
    assert spread["grpo"]["mean"] == pytest.approx(0.45) and spread["grpo"]["std"] == pytest.approx(0.05)
    assert seed_verdict(spread) == "grpo"
    close = seed_spread({"grpo": [0.4, 0.5], "ppo": [0.42, 0.44]})
    assert seed_verdict(close).startswith("tie within spread")
    assert seed_verdict(seed_spread({"grpo": [0.4]})) == "undecided"
