"""The training console: lines for logs, a live bar for a terminal."""

from tasks.console import StepConsole


def test_a_log_gets_one_line_per_step_and_every_message(capsys):
    console = StepConsole("grpo", total=2, live=False)
    console.step("grpo step 1/2: reward 0.5", {"reward_mean": 0.5})
    console.say("grpo: HEALTH step 1: entropy_collapse")
    console.step("grpo step 2/2: reward 0.7", {"reward_mean": 0.7})
    console.close()
    assert capsys.readouterr().out.splitlines() == [
        "grpo step 1/2: reward 0.5",
        "grpo: HEALTH step 1: entropy_collapse",
        "grpo step 2/2: reward 0.7",
    ]


def test_a_terminal_gets_a_bar_that_counts_from_a_resumed_step(capsys):
    console = StepConsole("grpo", total=4, done=2, live=True)
    console.say("grpo: resumed")
    console.step("a line a log would get", {"reward_mean": 0.25, "kl": 0.0123})
    console.close()
    out = capsys.readouterr().out
    assert "grpo: resumed" in out and "a line a log would get" not in out
    assert "3/4" in out and "reward_mean=0.25" in out and "kl=0.0123" in out


def test_a_step_line_numbers_steps_as_mlflow_does_and_says_time_left(monkeypatch):
    from tasks import rl_stage

    now = [100.0]
    monkeypatch.setattr(rl_stage.time, "monotonic", lambda: now[0])
    progress = rl_stage.Progress(total=28, done=0)
    now[0] += 50.0  # five steps in 50 s: 23 more take about 230 s
    clock = progress.clock(4)
    assert clock == ", 50 s elapsed, ~3 min 50 s left"
    m = {"reward_mean": 0.5, "kl": 0.001, "entropy": 1.2, "completion_length_mean": 40.0, "step_seconds": 9.9}
    line = rl_stage._console_line("grpo", 4, 28, m, clock)
    assert line.startswith("grpo step 4 (5/28 done, 50 s elapsed, ~3 min 50 s left): reward 0.500")
    resumed = rl_stage.Progress(total=28, done=20)  # a resumed run's pace is its own steps'
    now[0] += 10.0
    assert resumed.clock(20) == ", 10 s elapsed, ~1 min 10 s left"


def test_a_symptom_that_cleared_is_said_once_when_it_stayed_away_a_window():
    from grpoflow.rl.health import HealthMonitor
    from tasks.rl_stage import Clearing

    # length_cap held until step 2 (gone from step 3); kl_rising_fast still holds at the last step.
    monitor = HealthMonitor(last_held={"length_cap": 2, "kl_rising_fast": 6})
    clearing = Clearing(monitor, window=3)
    said = [[v["name"] for v in clearing.cleared([{"step": s}])] for s in range(7)]
    assert said == [[], [], [], [], [], ["length_cap"], []]  # steps 3, 4, 5 clear: said at 5, then never again
    assert clearing.cleared([]) == []
