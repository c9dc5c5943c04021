"""The experiments table, from the JSON ``dvc exp show --json`` prints."""

from flows.experiments import experiment_rows, format_rows


def _rev(name: str, timestamp: str, grpo: float, ppo: float) -> dict:
    metrics = {
        "metrics/run.json": {"data": {"params_file": "params/default.yaml", "overrides": {"rl.steps": 3}}},
        "metrics/evaluate.json": {
            "data": {
                "models": {
                    "grpo": {"test": {"pass@1": grpo}},
                    "sft": {"test": {"pass@1": 0.25}},
                    "ppo": {"test": {"pass@1": ppo}},
                }
            }
        },
        "metrics/grpo.json": {"data": {"seconds_per_step": 1.5}},
        "metrics/compare.json": {"data": {"winner_on_test_pass@1": "grpo" if grpo > ppo else "ppo"}},
    }
    return {"rev": "0123456789abcdef", "name": name, "data": {"timestamp": timestamp, "metrics": metrics}}


def test_one_row_per_experiment_newest_first_with_the_reference_first():
    shown = [
        {"rev": "workspace", "data": {}},
        {
            "rev": "abc",
            "experiments": [
                {"revs": [_rev("old-run", "2026-11-30T10:00:00", 0.5, 0.25)]},
                {"revs": [_rev("new-run", "2026-12-01T09:30:00", 0.25, 0.5)]},
            ],
        },
    ]
    rows = experiment_rows(shown)
    assert [r["experiment"] for r in rows] == ["new-run", "old-run"]
    assert rows[0] == {
        "experiment": "new-run",
        "created": "2026-12-01 09:30",
        "params": "params/default.yaml",
        "overrides": "rl.steps=3",
        "pass@1 sft": 0.25,
        "pass@1 grpo": 0.25,
        "pass@1 ppo": 0.5,
        "s/step grpo": 1.5,
        "winner": "ppo",
    }
    rows[1]["s/step ppo"] = 2.0  # a column only some rows have
    lines = format_rows(rows).splitlines()
    assert lines[0].split() == [
        "experiment",
        "created",
        "params",
        "overrides",
        "pass@1",
        "sft",
        "pass@1",
        "grpo",
        "pass@1",
        "ppo",
        "s/step",
        "grpo",
        "winner",
        "s/step",
        "ppo",
    ]
    assert lines[1].split()[-6:] == ["0.250", "0.250", "0.500", "1.500", "ppo", "-"]
    assert lines[2].split()[-2:] == ["grpo", "2.000"]


def test_no_experiment_says_how_one_is_made():
    assert "successful flow run" in format_rows(experiment_rows([{"rev": "workspace", "data": {}}]))
