import math

import pytest

from grpoflow.rl.health import HealthMonitor, TrainingDiverged


def feed(monitor, rows):
    seen = []
    for i, row in enumerate(rows):
        seen += [s.name for s in monitor.observe(i, row)]
    return seen


BASE = {
    "loss": 0.01,
    "kl": 0.01,
    "reward_mean": 0.5,
    "frac_zero_std_groups": 0.2,
    "entropy": 1.0,
    "frac_truncated": 0.0,
    "num_generations": 8,
}


def test_healthy_run_has_no_symptoms():
    rows = [{**BASE, "reward_mean": 0.3 + 0.01 * i, "loss": 0.01 * (-1) ** i} for i in range(60)]
    assert feed(HealthMonitor(), rows) == []


@pytest.mark.parametrize(
    "name, rows",
    [
        ("kl_rising_fast", [{**BASE, "kl": 0.01 * 3**i} for i in range(8)]),
        ("reward_flat", [{**BASE, "reward_mean": 0.5 + 0.05 * (-1) ** i} for i in range(40)]),
        ("unstable_loss", [{**BASE, "loss": 2.0 * (-1) ** i, "num_generations": 4} for i in range(12)]),
        ("degenerate_groups", [{**BASE, "frac_zero_std_groups": 0.95} for _ in range(6)]),
        ("entropy_collapse", [{**BASE, "entropy": 1.0 * 0.5**i} for i in range(8)]),
        ("length_cap", [{**BASE, "frac_truncated": 0.6} for _ in range(6)]),
        ("critic_not_learning", [{**BASE, "explained_variance": 0.05} for _ in range(10)]),
    ],
)
def test_each_symptom_is_detected_once_with_evidence(name, rows):
    monitor = HealthMonitor()
    seen = feed(monitor, rows + rows[-1:] * 3)
    assert seen.count(name) == 1
    assert monitor.symptoms[name].evidence and monitor.symptoms[name].remedy
    assert name in monitor.report()


def test_unstable_loss_is_not_blamed_on_g_when_g_is_large():
    rows = [{**BASE, "loss": 2.0 * (-1) ** i, "num_generations": 64} for i in range(12)]
    assert "unstable_loss" not in feed(HealthMonitor(), rows)


@pytest.mark.parametrize("key, value", [("loss", math.nan), ("loss", math.inf), ("grad_norm", math.nan)])
def test_non_finite_values_stop_training_with_a_diagnosis(key, value):
    with pytest.raises(TrainingDiverged, match=f"{key} is"):
        HealthMonitor().observe(3, {**BASE, key: value})


def history(rows):
    """Rows as the history CSV keeps them: strings, with the step."""
    return [{"step": str(i), **{k: str(v) for k, v in row.items()}} for i, row in enumerate(rows)]


def test_a_symptom_that_stops_holding_is_cleared_from_the_step_it_stopped():
    # the truncation share is 60% for 6 steps, then 0: the 5-step window's mean drops to 0.24
    # (<= 0.3) at step 8 (0.6 x 2 / 5), the first step it no longer holds
    rows = [{**BASE, "frac_truncated": 0.6}] * 6 + [BASE] * 10
    monitor = HealthMonitor()
    assert feed(monitor, rows) == ["length_cap"]
    (entry,) = monitor.verdict(history(rows))
    assert entry["name"] == "length_cap" and entry["step"] == 4
    assert entry["status"] == "cleared" and entry["cleared_by"] == 8
    assert "cleared by step 8" in monitor.report(monitor.verdict(history(rows)))


def test_a_symptom_that_still_holds_stands_and_so_does_an_event():
    from grpoflow.rl.health import Symptom

    rows = [{**BASE, "frac_truncated": 0.6}] * 8
    monitor = HealthMonitor()
    feed(monitor, rows)
    monitor.record(Symptom("oom_backoff", 3, "num_generations 8 -> 4", "out of memory", "lower G"))
    verdict = {v["name"]: v for v in monitor.verdict(history(rows))}
    assert verdict["length_cap"]["status"] == "standing" and "cleared_by" not in verdict["length_cap"]
    assert verdict["oom_backoff"]["status"] == "standing"  # an event has no rule to clear it


def test_a_flat_reward_that_rises_later_is_cleared():
    flat = [{**BASE, "reward_mean": 0.5 + 0.05 * (-1) ** i} for i in range(40)]
    rising = [{**BASE, "reward_mean": 0.6 + 0.01 * i} for i in range(40)]
    monitor = HealthMonitor()
    assert feed(monitor, flat + rising) == ["reward_flat"]
    (entry,) = monitor.verdict(history(flat + rising))
    assert entry["status"] == "cleared" and 40 < entry["cleared_by"] < 80


# -- PPO's critic: explained variance after its warm-up ------------------------------------------
def critic_rows(warmup: list[float], after: list[float]) -> list[dict]:
    """PPO steps: ``warmup`` explained variances of critic-only steps, then ``after`` of full ones."""
    return [{**BASE, "explained_variance": ev, "critic_warmup": 1.0} for ev in warmup] + [
        {**BASE, "explained_variance": ev, "critic_warmup": 0.0} for ev in after
    ]


def test_a_critic_that_does_not_learn_is_flagged_once_its_window_after_the_warmup_is_full():
    monitor = HealthMonitor()
    # 5 warm-up steps, then 10 full ones at 0.1: the window (10) fills at the 15th step, index 14.
    seen = feed(monitor, critic_rows([0.0] * 5, [0.1] * 10))
    assert seen == ["critic_not_learning"] and monitor.symptoms["critic_not_learning"].step == 14
    symptom = monitor.symptoms["critic_not_learning"]
    assert "median 0.100 over the last 10 steps" in symptom.evidence and "ppo.critic_warmup_steps" in symptom.remedy


@pytest.mark.parametrize(
    "warmup, after",
    [
        ([0.0] * 20, [0.5] * 9),  # low only while it warms up; the window after it is not full yet
        ([], [0.5] * 9 + [-3.0]),  # one noisy step: the median of the window is 0.5
        ([], [0.0, 0.1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.1, 0.1, 0.1]),  # median (0.3 + 0.1) / 2 = 0.2, not below
        ([], []),  # GRPO: no explained variance at all
    ],
)
def test_a_critic_that_learns_or_is_still_warming_up_is_not_flagged(warmup, after):
    rows = critic_rows(warmup, after) or [BASE] * 20
    assert "critic_not_learning" not in feed(HealthMonitor(), rows)


def test_a_critic_that_learns_later_is_cleared_in_the_verdict():
    rows = critic_rows([], [0.1] * 10 + [0.6] * 10)
    monitor = HealthMonitor()
    assert feed(monitor, rows) == ["critic_not_learning"]
    (entry,) = monitor.verdict(history(rows))
    # With k of the last 10 at 0.6, the 5th and 6th smallest are both 0.1 while k <= 4 (up to index 13);
    # at k = 5 (index 14) the median is (0.1 + 0.6) / 2 = 0.35, no longer below 0.2.
    assert entry["status"] == "cleared" and entry["cleared_by"] == 14
