"""Stage events: what a stage appends, the flow reads back, whole lines only."""

from __future__ import annotations

from tasks import events


def test_no_reader_means_no_file(tmp_path, monkeypatch):
    monkeypatch.delenv(events.EVENTS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    events.emit(events.PROGRESS, "grpo", step=1, total=2)
    assert list(tmp_path.iterdir()) == []


def test_events_round_trip_and_a_partial_line_waits(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(events.EVENTS_ENV, str(path))
    events.emit(events.PROGRESS, "grpo", step=1, total=2)
    events.emit(events.HEALTH, "grpo", name="kl_rising_fast", step=0, evidence="kl 0.1 -> 0.9")
    with open(path, "a") as fh:
        fh.write('{"event": "exit", "stage"')  # a write still under way
    got, offset = events.read(path)
    assert got == [
        {"event": "progress", "stage": "grpo", "step": 1, "total": 2},
        {"event": "health", "stage": "grpo", "name": "kl_rising_fast", "step": 0, "evidence": "kl 0.1 -> 0.9"},
    ]
    with open(path, "a") as fh:
        fh.write(': "grpo", "code": 3}\n')
    more, _ = events.read(path, offset)
    assert more == [{"event": "exit", "stage": "grpo", "code": 3}]
    assert events.read(tmp_path / "none.jsonl") == ([], 0)
