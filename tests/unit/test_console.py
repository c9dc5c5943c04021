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
