"""``make metrics``: the headline numbers of the workspace's metrics files, in a narrow table."""

import json

from hypothesis import given
from hypothesis import strategies as st

from flows.metrics import RUN_RECORD_LOCK, WIDTH, _wrapped, format_summary, lock_entries, read_workspace, summarize

FOUND = {
    "base_model": {"kind": "tiny", "seconds": 6.6},
    "prepare": {"passed": True, "rows": {"kept": 400, "quarantined": 3}, "seconds": 5.324},
    "validate_verifiers": {"passed": True, "failures": [], "seconds": 3.1},
    "sft": {"final_loss": 5.2, "seconds": 2.4},
    "grpo": {"seconds_per_step": 0.335, "steps": 150, "peak_memory_mb": 881.9, "seconds": 112.0},
    "ppo": {"seconds_per_step": 0.425, "steps": 150, "peak_memory_mb": 900.9, "seconds": 140.0},
    "evaluate": {
        "models": {
            "grpo": {"test": {"pass@1": 0.4}},
            "ppo": {"test": {"pass@1": 0.3625}},
            "sft": {"test": {"pass@1": 0.25}},
        },
        "seconds": 61.0,
    },
    "compare": {"winner_on_test_pass@1": "grpo", "summaries": {"grpo": {"phases": list(range(500))}}, "seconds": 4.2},
    "run": {"params_file": "params/default.yaml", "overrides": {"rl.steps": 150}},
}


def test_the_headline_is_a_few_short_lines():
    text = format_summary(summarize(FOUND))
    assert text.splitlines() == [
        "params/default.yaml, overrides: rl.steps=150",
        "model  test pass@1     vs sft  s/step  steps  peak MiB",
        "sft          25.0%          -       -      -         -",
        "grpo         40.0%  +15.0 pts    0.34    150       882",
        "ppo          36.2%  +11.2 pts    0.42    150       901",
        "winner on test pass@1: grpo",
        "gates: prepare passed (400 rows kept, 3 quarantined), validate_verifiers passed",
        "stage time: 335 s (base_model 6.6, prepare 5.3, validate_verifiers 3.1,",
        "  sft 2.4, grpo 112, ppo 140, evaluate 61, compare 4.2)",  # broken between stages, never inside one
    ]
    assert max(map(len, text.splitlines())) < 80


@given(st.lists(st.from_regex(r"[a-z_]{1,30} [0-9]{1,4}(\.[0-9])?", fullmatch=True), min_size=1, max_size=20))
def test_a_long_list_is_broken_only_between_its_parts(parts):
    lines = _wrapped("stage time: 1 s (", parts)
    assert max(map(len, lines)) <= WIDTH and all(line.startswith("  ") for line in lines[1:])
    assert lines[0] + "".join(" " + line[2:] for line in lines[1:]) == "stage time: 1 s (" + ", ".join(parts) + ")"


# Metrics of a run made before validate_verifiers, evaluate and compare kept their time.
UNTIMED = {
    n: {k: v for k, v in m.items() if k != "seconds"} if n in ("validate_verifiers", "evaluate", "compare") else m
    for n, m in FOUND.items()
}


def test_stages_that_kept_no_time_are_named_and_left_out_of_the_sum():
    assert format_summary(summarize(UNTIMED)).splitlines()[-2:] == [
        "stage time: 266 s (base_model 6.6, prepare 5.3, sft 2.4, grpo 112, ppo 140)",
        "no time kept for validate_verifiers, evaluate, compare",  # not in the sum: it is not the run's time
    ]


def test_a_failed_gate_and_a_run_not_yet_evaluated():
    found = {"prepare": {"passed": False, "rows": {"kept": 0, "quarantined": 400}, "seconds": 1.0}}
    assert format_summary(summarize(found)).splitlines() == [
        "not evaluated yet (no metrics/evaluate.json)",
        "gates: prepare FAILED (0 rows kept, 400 quarantined)",
        "stage time: 1 s (prepare 1.0)",
    ]


def test_the_files_are_read_where_dvc_yaml_declares_them(tmp_path):
    (tmp_path / "metrics").mkdir()
    for name in ("evaluate", "grpo", "sft"):
        (tmp_path / "metrics" / f"{name}.json").write_text(json.dumps(FOUND[name]))
    (tmp_path / "metrics" / "run.json").write_text(json.dumps(FOUND["run"]))
    assert read_workspace(tmp_path) == {n: FOUND[n] for n in ("sft", "grpo", "evaluate", "run")}
    assert read_workspace(tmp_path / "nothing") == {}


def test_a_recorded_run_shows_each_stages_wall_time_as_the_run_page_and_mlflow_do():
    walls = {"prepare": 9.5, "grpo": 130.25}  # the flow's clock around each stage, DVC's checks included
    found = {k: FOUND[k] for k in ("prepare", "grpo")} | {"run": {**FOUND["run"], "stage_seconds": walls}}
    assert format_summary(summarize(found)).splitlines()[-1] == "stage time: 140 s (prepare 9.5, grpo 130)"


LOCK = """schema: '2.0'
stages:
  prepare:
    cmd: python -m tasks.prepare
    outs:
    - path: data/prepared
      md5: 1111.dir
  grpo:
    cmd: python -m tasks.grpo
    params:
      params/default.yaml:
        rl.steps: 3
    outs:
    - path: models/grpo
      md5: 2222.dir
"""


def _recorded(root, stages: list[str]) -> dict:
    """The record a run of ``stages`` leaves over the dvc.lock in place (flows/experiments.py's)."""
    (root / "metrics").mkdir(exist_ok=True)
    record = {**FOUND["run"], "dvc_experiment": "nightly-1a2b3c4d", RUN_RECORD_LOCK: lock_entries(stages, root)}
    (root / "metrics" / "run.json").write_text(json.dumps(record))
    return record


def test_the_run_record_stands_while_every_stage_it_ran_keeps_the_lock_entry_it_left(tmp_path):
    (tmp_path / "dvc.lock").write_text(LOCK)
    record = _recorded(tmp_path, ["prepare", "grpo"])
    assert read_workspace(tmp_path) == {"run": record}
    (tmp_path / "dvc.lock").write_text(LOCK + "  ablation_report:\n    cmd: x\n")  # no pipeline stage of its own
    assert read_workspace(tmp_path) == {"run": record}
    (tmp_path / "dvc.lock").write_text(LOCK.replace("rl.steps: 3", "rl.steps: 20"))  # `dvc repro` after the run
    assert read_workspace(tmp_path) == {"earlier_run": record}
    (tmp_path / "dvc.lock").unlink()
    assert read_workspace(tmp_path) == {"earlier_run": record}


def test_a_run_that_made_only_some_of_the_outputs_in_place_is_not_their_run(tmp_path):
    """An ablation's record names the shared stages and its arms: grpo's outputs are another run's."""
    (tmp_path / "dvc.lock").write_text(LOCK)
    record = _recorded(tmp_path, ["prepare"])
    assert read_workspace(tmp_path) == {"earlier_run": record}


def test_a_lock_entry_is_read_not_its_layout(tmp_path):
    (tmp_path / "dvc.lock").write_text(LOCK)
    before = lock_entries(root=tmp_path)
    (tmp_path / "dvc.lock").write_text(
        LOCK.replace("    cmd: python -m tasks.grpo\n", "    cmd: 'python -m tasks.grpo'\n")
    )
    assert lock_entries(root=tmp_path) == before and set(before) == {"prepare", "grpo"}


def test_a_record_written_before_the_digest_was_kept_is_taken_at_its_word(tmp_path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "run.json").write_text(json.dumps(FOUND["run"]))
    assert read_workspace(tmp_path) == {"run": FOUND["run"]}


def test_an_earlier_runs_record_lends_the_outputs_neither_its_overrides_nor_its_stage_times():
    earlier = {**FOUND["run"], "dvc_experiment": "nightly-1a2b3c4d", "stage_seconds": {"grpo": 999.0}}
    found = {k: v for k, v in UNTIMED.items() if k != "run"} | {"earlier_run": earlier}
    lines = format_summary(summarize(found)).splitlines()
    assert lines[:2] == [
        "metrics/run.json is experiment nightly-1a2b3c4d's, which did not make all",
        "the outputs in place: its params, overrides and stage times are not shown",
    ]
    assert lines[-2:] == [
        "stage time: 266 s (base_model 6.6, prepare 5.3, sft 2.4, grpo 112, ppo 140)",
        "no time kept for validate_verifiers, evaluate, compare",
    ]
    assert "overrides" not in "\n".join(lines[2:]) and max(map(len, lines)) < 80


def test_before_any_run_the_hint_names_what_writes_the_workspaces_metrics(tmp_path, monkeypatch, capsys):
    """It named `make smoke`, whose metrics stay in .grpoflow/smoke/<set>/: the hint came back after one."""
    from flows.metrics import main

    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    said = capsys.readouterr().out
    assert said.startswith("no metrics yet") and "make demo" in said and "make smoke" not in said
    assert ".grpoflow/smoke/<set>/metrics/" in said
