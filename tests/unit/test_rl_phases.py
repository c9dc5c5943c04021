"""Where a step's time goes: the phases of a real short step on the tiny model are all there,
never negative, and with "other" sum to the step's wall; nested phases are not counted twice."""

from __future__ import annotations

import time

import pytest

from grpoflow import metric_names as M
from grpoflow.algorithms.grpo.update import ALGORITHM as GRPO
from grpoflow.algorithms.ppo.update import ALGORITHM as PPO
from grpoflow.config import validate_params
from grpoflow.rl.run import build_rl_run
from grpoflow.rl.step_timing import PhaseTimer
from tests.unit import rl_workspace

TINY = {
    "rl": {
        "steps": 2,
        "prompts_per_step": 2,
        "num_generations": 2,
        "checkpoint_every": 100,
        "eval_every": 2,
        "sampling": {"max_completion_length": 4},
        "engine": {"micro_batch_size": 4},
    },
    "ppo": {"critic_engine": {"micro_batch_size": 4}},
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A prepared split and a saved tiny reference model, as the stages leave them."""
    return rl_workspace.build(tmp_path_factory.mktemp("phases"))


def _check_split(m: dict) -> None:
    assert all(k in m for k in (*M.PHASES, M.PHASE_WALL))
    assert all(m[k] >= 0.0 for k in (*M.PHASES, M.PHASE_WALL))
    assert sum(m[k] for k in M.PHASES) == pytest.approx(m[M.PHASE_WALL], rel=1e-9)
    assert m[M.PHASE_WALL] >= m[M.STEP_SECONDS]  # the step, plus its evaluation
    for key in (M.PHASE_ROLLOUT, M.PHASE_REWARD, M.PHASE_UPDATE, M.PHASE_WEIGHT_SYNC):
        assert m[key] > 0.0, key


@pytest.mark.parametrize(
    "algorithm, raw, old",
    [
        (GRPO, {}, False),  # one iteration: no old log-probs pass
        (GRPO, {"rl": {**TINY["rl"], "num_iterations": 2}}, True),
        (PPO, {}, True),  # PPO's ratio needs them always
    ],
)
def test_a_real_step_logs_every_phase_and_they_sum_to_its_wall(workspace, algorithm, raw, old):
    params = validate_params({**TINY, **raw})
    run = build_rl_run(params, algorithm, data_dir=workspace / "data", reference_dir=workspace / "ref")
    steps: list[dict] = []
    run.trainer.train(on_step=lambda step, m: steps.append(m), evaluate=run.evaluate)
    assert len(steps) == 2
    for m in steps:
        _check_split(m)
        assert m[M.PHASE_REF_LOGPROBS] > 0.0  # beta / kl_coef > 0 by default: a reference pass
        assert (m[M.PHASE_OLD_LOGPROBS] > 0.0) is old
        assert m[M.PHASE_CHECKPOINT] == 0.0  # its caller books it (tasks.rl_stage)
    assert steps[0][M.PHASE_EVALUATE] == 0.0 and steps[1][M.PHASE_EVALUATE] > 0.0  # eval_every 2


def test_nested_phases_are_subtracted_from_the_outer_one_and_repeats_add_up():
    timer = PhaseTimer()
    with timer.phase(M.PHASE_UPDATE):
        time.sleep(0.02)
        with timer.phase(M.PHASE_REF_LOGPROBS):
            time.sleep(0.03)
    for _ in range(2):
        with timer.phase(M.PHASE_ROLLOUT):
            time.sleep(0.01)
    s = timer.seconds
    # Lower bounds only (sleep never returns early); the exclusive update excludes the inner 0.03 s.
    assert s[M.PHASE_REF_LOGPROBS] >= 0.03 and s[M.PHASE_UPDATE] >= 0.02 and s[M.PHASE_ROLLOUT] >= 0.02
    wall = s[M.PHASE_UPDATE] + s[M.PHASE_REF_LOGPROBS] + s[M.PHASE_ROLLOUT] + 0.5
    split = timer.split(wall)
    assert split[M.PHASE_OTHER] == pytest.approx(0.5) and split[M.PHASE_WALL] == wall
    assert split[M.PHASE_CHECKPOINT] == 0.0 and sum(split[k] for k in M.PHASES) == pytest.approx(wall)


def test_the_checkpoint_is_booked_into_its_steps_row_and_the_summary_gives_mean_and_share(tmp_path):
    from tasks.rl_stage import History, phase_split

    split = {M.PHASE_ROLLOUT: 1.0, M.PHASE_UPDATE: 2.0, M.PHASE_OTHER: 1.0, M.PHASE_WALL: 4.0}
    history = History(tmp_path / "h.csv", [])
    history.add(0, split)
    history.add(1, split, write=False)
    row = history.add_checkpoint_time(4.0)
    assert row[M.PHASE_CHECKPOINT] == 4.0 and row[M.PHASE_WALL] == 8.0
    history.write()
    header = (tmp_path / "h.csv").read_text().splitlines()[0].split(",")
    assert header == M.HISTORY_FIELDS and M.PHASE_CHECKPOINT in header and M.PHASE_WALL in header
    out = phase_split([*history.rows, {M.PHASE_WALL: ""}])  # a row from before the split is left out
    # Mean wall 6 s: rollout 1 s (1/6), update 2 s (2/6), checkpoint (0 + 4) / 2 = 2 s (2/6), other 1 s.
    assert out["rollout"] == {"mean_s": 1.0, "share": pytest.approx(1 / 6)}
    assert out["checkpoint"] == {"mean_s": 2.0, "share": pytest.approx(1 / 3)}
    assert out["ref_logprobs"] == {"mean_s": 0.0, "share": 0.0}
    assert sum(v["share"] for v in out.values()) == pytest.approx(1.0)
    assert phase_split([{M.PHASE_WALL: ""}]) == {}


def test_every_phase_is_a_history_column_and_a_perf_chart():
    for key in (*M.PHASES, M.PHASE_WALL):
        assert key in M.HISTORY_FIELDS
        assert M.tracked(key) == f"perf/{key}"
    assert M.tracked(M.PHASE_ROLLOUT) == "perf/phase/rollout_s"
    assert len(set(M.HISTORY_FIELDS)) == len(M.HISTORY_FIELDS)


def test_a_checkpointed_step_is_written_and_logged_once_with_its_checkpoint_time(workspace, tmp_path):
    import csv

    from tasks.rl_stage import History, StepRecorder

    params = validate_params({**TINY, "rl": {**TINY["rl"], "checkpoint_every": 1, "eval_every": 100}})
    run = build_rl_run(params, GRPO, data_dir=workspace / "data", reference_dir=workspace / "ref")
    history, logged = History(tmp_path / "history.csv", []), []
    recorder = StepRecorder(history, lambda step, m: logged.append((step, m)), run.trainer.checkpoint_due)
    saved_rows = []

    def on_checkpoint(step, state):
        def save():
            saved_rows.append(len(history.rows))  # the step's row is in the history the checkpoint carries
            run.save(tmp_path / "ckpt", state, {"history_rows": history.rows})

        recorder.checkpoint(save)

    run.trainer.train(
        on_step=lambda step, m: recorder.step(step, {k: v for k, v in m.items() if k != "new_symptoms"}),
        on_checkpoint=on_checkpoint,
    )
    assert saved_rows == [1, 2] and [s for s, _ in logged] == [0, 1]
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert len(rows) == 2
    for row, (_, m) in zip(rows, logged):
        assert float(row[M.PHASE_CHECKPOINT]) > 0.0 and m[M.PHASE_CHECKPOINT] == float(row[M.PHASE_CHECKPOINT])
        assert sum(float(row[k]) for k in M.PHASES) == pytest.approx(float(row[M.PHASE_WALL]), rel=1e-9)
        assert m[M.PHASE_WALL] == pytest.approx(float(row[M.PHASE_WALL]))
