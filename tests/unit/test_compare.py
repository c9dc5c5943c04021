import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpoflow.evaluation.compare import arm_memory, memory_breakdown, paired_test, stability, step_spread, winner


def _model(params: int, trained: int, weights: float, grads: float, optim: float) -> dict:
    return {
        "parameters": params,
        "trainable_parameters": trained,
        "weights_mb": weights,
        "gradients_mb": grads,
        "optimizer_mb": optim,
    }


GRPO = {"before_training_mb": 1600.0, "peak_mb": 2000.0, "models": {"policy": _model(100, 10, 500.0, 2.0, 4.0)}}
PPO = {
    "before_training_mb": 2100.0,
    "peak_mb": 2700.0,
    "models": {"policy": _model(100, 10, 500.0, 2.0, 4.0), "critic": _model(101, 11, 500.0, 3.0, 6.0)},
}


def test_an_arms_peak_splits_into_runtime_model_state_and_activations_by_hand():
    # weights 500, gradients 2, optimizer 4; before training 1600 -> runtime 1100; peak 2000 -> activations 394
    assert arm_memory(GRPO) == {
        "peak_mb": 2000.0,
        "weights_mb": 500.0,
        "gradients_mb": 2.0,
        "optimizer_mb": 4.0,
        "activations_mb": 394.0,
        "runtime_mb": 1100.0,
    }


def test_the_memory_breakdown_names_the_critics_share_and_both_predictions_by_hand():
    m = memory_breakdown(GRPO, PPO, ("grpo", "ppo"))
    assert m["critic_model_state_mb"] == 509.0 and m["difference_mb"] == 700.0 and m["other_mb"] == 191.0
    # PPO's activations: 2700 - 2100 - 5 - 10 = 585, GRPO's 394: the critic holds 191 more at the peak
    assert m["arms"]["ppo"]["activations_mb"] == 585.0 and m["critic_activations_mb"] == 191.0
    assert m["grpo_over_ppo"] == pytest.approx(2000 / 2700)
    assert m["grpo_over_ppo_theory_peak"] == pytest.approx(2000 / 2509)
    assert m["grpo_over_ppo_theory_model_state"] == pytest.approx(506 / 1015)
    assert m["critic_parameters"] == 101 and m["critic_trainable_parameters"] == 11
    assert m["pair"] == ["grpo", "ppo"] and "rloo_over_ppo" in memory_breakdown(GRPO, PPO, ("rloo", "ppo"))


def test_a_paired_test_on_one_sample_per_prompt_is_mcnemars_exact_test_by_hand():
    a = [1, 1, 1, 1, 1, 0, 0, 1, 0, 0]
    b = [0, 0, 0, 0, 1, 0, 1, 1, 0, 0]
    t = paired_test(a, b)
    # differences: four +1, one -1, five 0 -> mean 0.3; sample var (4 * 0.49 + 0.09 * 5 + 1.69) / 9 = 0.4556
    assert t["difference"] == pytest.approx(0.3) and t["se"] == pytest.approx(math.sqrt(0.45556 / 10), abs=1e-5)
    # 5 discordant prompts, 4 of them a's: P(X <= 1 or X >= 4 | Binomial(5, 0.5)) = 12 / 32
    assert (t["a_only"], t["b_only"]) == (4, 1) and t["p_value"] == pytest.approx(0.375)
    assert t["test"].startswith("McNemar")


def test_a_paired_test_on_several_samples_per_prompt_is_the_paired_t_test_by_hand():
    t = paired_test([0.5, 0.75, 1.0, 0.25], [0.25, 0.5, 0.5, 0.25])
    # differences 0.25, 0.25, 0.5, 0: mean 0.25, sample std 0.2041; t = 0.25 / (0.2041 / 2) = 2.449, df 3 -> p 0.0917
    assert t["difference"] == pytest.approx(0.25) and t["se"] == pytest.approx(0.10206, abs=1e-5)
    assert t["p_value"] == pytest.approx(0.0917, abs=2e-4) and "paired t" in t["test"]
    with pytest.raises(ValueError, match="same prompts"):
        paired_test([1.0, 0.0], [1.0])


@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 1.0])), min_size=2, max_size=60))
def test_a_paired_test_is_antisymmetric_and_its_interval_holds_the_difference(pairs):
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ab, ba = paired_test(a, b), paired_test(b, a)
    assert ab["difference"] == pytest.approx(-ba["difference"]) and ab["p_value"] == pytest.approx(ba["p_value"])
    assert ab["ci95"][0] <= ab["difference"] <= ab["ci95"][1] and 0.0 <= ab["p_value"] <= 1.0
    assert ab["a_only"] == ba["b_only"] and ab["a_only"] + ab["b_only"] == sum(x != y for x, y in pairs)


def test_the_step_spread_is_the_std_of_step_to_step_jumps_by_hand():
    rows = [{"reward_mean": str(v)} for v in (0.0, 1.0, 1.0, 3.0)]  # jumps 1, 0, 2: std sqrt(2/3)
    assert step_spread(rows, "reward_mean") == pytest.approx(math.sqrt(2 / 3))
    trend = [{"reward_mean": str(0.1 * i)} for i in range(10)]  # a steady climb jumps alike every step
    assert step_spread(trend, "reward_mean") == pytest.approx(0.0, abs=1e-12)
    assert step_spread(rows[:2], "reward_mean") is None


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
