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
    rows = [{"step": str(s), "reward_mean": str(0.1 * s), "kl": "0.01", "val_accuracy": ""} for s in range(12)]
    rows[9]["val_accuracy"] = "0.47"
    path = plots.plot_curves({"grpo": rows}, tmp_path, {"grpo": 0.31})
    assert path.is_file()
    reward_ax, kl_ax, val_ax = drawn["fig"].axes
    (val_line,) = val_ax.get_lines()
    assert list(val_line.get_xdata()) == [0, 9] and list(val_line.get_ydata()) == [0.31, 0.47]
    raw, smooth = reward_ax.get_lines()  # raw points faint, the moving average over them
    assert raw.get_alpha() < 1 and list(smooth.get_ydata())[-1] == pytest.approx(
        sum(0.1 * s for s in range(2, 12)) / 10
    )
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in drawn["fig"].axes)
    real_close(drawn["fig"])
