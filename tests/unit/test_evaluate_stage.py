"""The evaluate stage's own code around the scoring: its progress while it runs."""


def test_evaluate_says_how_far_it_is_at_least_every_interval(capsys):
    # A 6-minute evaluate said nothing until it ended.
    import time

    from tasks.evaluate import Heartbeat

    with Heartbeat(total_prompts=600, every_s=0.05) as beat:
        beat.done = 300
        beat.begin("sft on test, sampled (300 prompts x 8)", 2400)
        beat.advance(1000)
        beat.advance(200)  # as the rollout engine finishes samples
        deadline, printed = time.monotonic() + 10, ""
        while "1200/2400" not in printed and time.monotonic() < deadline:
            time.sleep(0.02)
            printed += capsys.readouterr().out
        said = beat.line()
    assert "evaluate: 300/600 prompts scored" in printed  # printed by its thread, unasked
    assert said.startswith(
        "evaluate: 300/600 prompts scored (models x sets), now sft on test, sampled (300 prompts x 8): "
        "1200/2400 samples; "
    )
    assert not beat.thread.is_alive()  # stopped with the stage
