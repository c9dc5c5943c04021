"""The report's curves: a moving average by hand, and validation accuracy from the reference's score."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from tasks import plots


def test_moving_average_by_hand():
    assert plots.moving_average([1.0, 3.0, 5.0, 7.0], window=2) == pytest.approx([1.0, 2.0, 4.0, 6.0])
    assert plots.moving_average([2.0, 4.0, 6.0], window=10) == pytest.approx([2.0, 3.0, 4.0])
    assert plots.moving_average([]) == []


def test_curves_start_validation_at_the_reference_and_label_every_axis(tmp_path, monkeypatch):
    drawn = {}
    real_close = plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig: drawn.setdefault("fig", fig))
    rows = [
        {"step": str(s), "reward_mean": str(0.1 * s), "kl": "0.01", "group_reward_std": str(0.2), "val_accuracy": ""}
        for s in range(12)
    ]
    rows[9]["val_accuracy"] = "0.47"
    path = plots.plot_curves({"grpo": rows}, tmp_path, {"grpo": 0.31})
    assert path.is_file()
    reward_ax, kl_ax, spread_ax, val_ax = drawn["fig"].axes
    assert spread_ax.get_title() == "reward std within a prompt's group" and len(spread_ax.get_lines()) == 2
    (val_line,) = val_ax.get_lines()
    assert list(val_line.get_xdata()) == [0, 9] and list(val_line.get_ydata()) == [0.31, 0.47]
    raw, smooth = reward_ax.get_lines()  # raw points faint, the moving average over them
    assert raw.get_alpha() < 1 and list(smooth.get_ydata())[-1] == pytest.approx(
        sum(0.1 * s for s in range(2, 12)) / 10
    )
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in drawn["fig"].axes)
    real_close(drawn["fig"])


def _row(step: int, wall: float, val: str = "") -> dict:
    return {"step": str(step), "phase/wall_s": str(wall), "val_accuracy": val}


def test_accuracy_by_wall_clock_by_hand():
    # Seed 0: 10 s a step, evaluated at steps 1 and 3; seed 1: 20 s a step. At step 1: 20 s and 40 s
    # spent (mean 30), accuracies 0.4 and 0.6; at step 3: 40 s and 80 s, 0.5 and 0.5.
    seed0 = [_row(0, 10), _row(1, 10, "0.4"), _row(2, 10), _row(3, 10, "0.5")]
    seed1 = [_row(0, 20), _row(1, 20, "0.6"), _row(2, 20), _row(3, 20, "0.5")]
    curve = plots.accuracy_by_wall_clock([seed0, seed1], start=0.3)
    assert curve[0] == (0.0, 0.3, 0.0)
    assert curve[1] == pytest.approx((30.0, 0.5, 0.1414213562))  # stdev of 0.4 and 0.6
    assert curve[2] == pytest.approx((60.0, 0.5, 0.0))
    # A step one seed never reached is left out; one seed has no spread; step_seconds stands in.
    short = [{"step": "0", "step_seconds": "5", "val_accuracy": "0.7"}]
    (point,) = plots.accuracy_by_wall_clock([seed0[:2], short + seed0[1:2]])  # step 0: only the second has it
    assert point == pytest.approx((17.5, 0.4, 0.0))  # step 1: 20 s and 15 s spent
    assert plots.accuracy_by_wall_clock([short]) == [(5.0, 0.7, 0.0)]


def test_wall_clock_plot_draws_a_band_per_arm_in_minutes(tmp_path, monkeypatch):
    drawn = {}
    real_close = plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig: drawn.setdefault("fig", fig))
    runs = [[_row(0, 60), _row(1, 60, "0.5")], [_row(0, 120), _row(1, 120, "0.7")]]
    path = plots.plot_accuracy_by_wall_clock({"grpo": runs, "ppo": runs[:1]}, tmp_path, {"grpo": 0.3})
    assert path.name == "wall_clock.png" and path.is_file()
    (ax,) = drawn["fig"].axes
    grpo, ppo = ax.get_lines()
    assert list(grpo.get_xdata()) == pytest.approx([0.0, 3.0]) and list(grpo.get_ydata()) == pytest.approx([0.3, 0.6])
    assert list(ppo.get_xdata()) == pytest.approx([2.0]) and grpo.get_label() == "grpo (2 seeds)"
    assert len(ax.collections) == 2 and ax.get_xlabel() and ax.get_ylabel()  # a band per arm
    real_close(drawn["fig"])


def test_the_memory_chart_stacks_each_arms_parts_to_its_peak(tmp_path, monkeypatch):
    drawn = {}
    real_close = plt.close
    monkeypatch.setattr(plots.plt, "close", lambda fig: drawn.setdefault("fig", fig))
    parts = ("runtime_mb", "weights_mb", "activations_mb")
    arms = {
        "grpo": {"runtime_mb": 1000.0, "weights_mb": 500.0, "activations_mb": 300.0},
        "ppo": {"runtime_mb": 1000.0, "weights_mb": 1000.0, "activations_mb": -5.0},  # noise below 0 draws nothing
    }
    assert plots.plot_memory(arms, parts, tmp_path).is_file()
    (ax,) = drawn["fig"].axes
    tops = {}
    for bar in ax.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert tops == {0: 1800.0, 1: 2000.0}
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["runtime", "weights", "activations"]
    real_close(drawn["fig"])
