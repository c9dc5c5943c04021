import pytest

from grpoflow.evaluation.compare import memory_breakdown, model_state_mb, stability, winner


def test_memory_breakdown_attributes_the_critic_state():
    m = memory_breakdown({"peak_memory_mb": 1000.0}, {"peak_memory_mb": 1100.0}, 2**20, ("grpo", "ppo"))
    assert m["critic_model_state_mb"] == model_state_mb(2**20) == 16.0
    assert m["difference_mb"] == 100.0 and m["other_mb"] == 84.0
    assert m["grpo_over_ppo"] == pytest.approx(1000 / 1100)


def test_winner_and_stability():
    assert winner({"grpo": {"test_pass@1": 0.5}, "ppo": {"test_pass@1": 0.4}}) == "grpo"
    assert winner({"grpo": {"test_pass@1": 0.4}, "ppo": {"test_pass@1": 0.4}}) == "tie"
    assert winner({"grpo": {}, "ppo": {"test_pass@1": 0.4}}) == "undecided"
    rows = [{"reward_mean": str(v)} for v in (0, 0, 1, 1)]
    assert stability(rows, "reward_mean", window=2) == 0.0 and stability(rows, "reward_mean", window=4) == 0.5


def test_arm_stats_mean_std_and_t_interval_by_hand():
    from grpoflow.evaluation.compare import arm_stats

    st = arm_stats([0.4, 0.5, 0.6])
    # mean 0.5, sample std 0.1, t(0.975, 2) = 4.302653: half-width 4.302653 * 0.1 / sqrt(3) = 0.248414
    assert st["mean"] == pytest.approx(0.5) and st["std"] == pytest.approx(0.1) and st["n"] == 3
    assert st["ci95"] == [pytest.approx(0.5 - 0.248414, abs=1e-6), pytest.approx(0.5 + 0.248414, abs=1e-6)]
    assert arm_stats([0.3]) == {"mean": 0.3, "std": None, "ci95": None, "n": 1, "values": [0.3]}


def test_the_verdict_is_welchs_test_against_the_baseline_by_hand():
    from grpoflow.evaluation.compare import verdict

    # means 0.5 and 0.8, variances 0.01 each, n 3: t = 0.3 / sqrt(0.02 / 3) = 3.674; df 4 -> p = 0.0213
    better = verdict([0.4, 0.5, 0.6], [0.7, 0.8, 0.9])
    assert better["verdict"] == "better" and better["p_value"] == pytest.approx(0.0213, abs=2e-4)
    assert verdict([0.7, 0.8, 0.9], [0.4, 0.5, 0.6])["verdict"] == "worse"
    assert verdict([0.4, 0.5, 0.6], [0.45, 0.55, 0.5])["verdict"] == "tie"
    assert verdict([0.4], [0.9, 0.8])["verdict"] == "undecided"
    assert (
        verdict([0.5, 0.5], [0.5, 0.5])["verdict"] == "tie" and verdict([0.5, 0.5], [0.6, 0.6])["verdict"] == "better"
    )
    # a cost (less is better): the same test, the words turned round
    assert verdict([0.4, 0.5, 0.6], [0.7, 0.8, 0.9], higher_is_better=False)["verdict"] == "worse"
    assert verdict([0.7, 0.8, 0.9], [0.4, 0.5, 0.6], higher_is_better=False)["verdict"] == "better"
