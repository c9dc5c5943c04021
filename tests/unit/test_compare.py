
import pytest

from grpoflow.compare import memory_breakdown, model_state_mb, stability, winner


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
