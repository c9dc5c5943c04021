"""The ablation's arms: definitions, the set each trains with, their DVC stages, and the report's
statistics on hand-made results."""

from __future__ import annotations

import pytest

from grpoflow.config import ConfigError, arm_params, validate_params
from tasks.stages import ablation_stages, dvc_spec


def test_each_arm_trains_the_set_with_its_overrides_and_dapo_spelled_out():
    params = validate_params(
        {
            "rl": {"sampling": {"max_completion_length": 40}},
            "ablation": {
                "arms": ["grpo", "dapo", "mine"],
                "custom_arms": {"mine": {"overrides": {"rl.entropy_coef": 0.02}}},
            },
        }
    )
    assert arm_params(params, "grpo") == params
    dapo = arm_params(params, "dapo")
    assert (
        dapo.rl.clip_eps_high,
        dapo.rl.aggregation,
        dapo.rl.dynamic_sampling.enabled,
        dapo.rl.overlong_buffer,
        dapo.grpo.beta,
    ) == (0.28, "bnpo", True, 8, 0.0)  # a fifth of this set's cap of 40
    assert arm_params(params, "mine").rl.entropy_coef == 0.02 and params.rl.entropy_coef == 0.0


def test_a_bad_arm_is_refused_naming_it():
    with pytest.raises(ConfigError, match="did you mean 'rloo'"):
        validate_params({"ablation": {"arms": ["grpo", "rlo"]}})
    with pytest.raises(
        ConfigError, match="arm 'bad'.*rl.nope"
    ):  # at load (grpoflow.config.rules), not when the arm starts
        validate_params({"ablation": {"arms": ["bad"], "custom_arms": {"bad": {"overrides": {"rl.nope": 1}}}}})
    params = validate_params({"ablation": {"custom_arms": {"bad": {"overrides": {"rl.nope": 1}}}}})  # not trained
    with pytest.raises(ConfigError, match="arm 'bad'"):
        arm_params(params, "bad")


def test_every_arm_and_seed_is_a_dvc_stage_and_the_report_reads_them_all():
    spec = dvc_spec(
        "params/default.yaml", ["base_model", "prepare", "validate_verifiers", "sft"], ["grpo", "ppo"], [0, 1]
    )
    assert list(spec["stages"])[4:] == ["arm_grpo_s0", "arm_grpo_s1", "arm_ppo_s0", "arm_ppo_s1", "ablation_report"]
    arm = spec["stages"]["arm_ppo_s1"]
    assert arm["cmd"].endswith("--history metrics/arms/ppo-s1_history.csv --arm ppo --seed 1")
    covers = [
        d
        for d in arm["deps"]
        if "grpoflow/algorithms/ppo/update.py" == d
        or "grpoflow/algorithms/ppo/update.py".startswith(d.rstrip("/") + "/")
    ]
    assert "models/sft" in arm["deps"] and "tasks/arm.py" in arm["deps"] and covers
    # A seed's stage reads no params key that another seed changes: adding a seed leaves the others cached.
    assert not any(k.startswith("ablation") for k in arm["params"][0]["${params_file}"])
    report = spec["stages"]["ablation_report"]
    assert "metrics/arms/grpo-s1.json" in report["deps"] and "grpo-s0=metrics/arms/grpo-s0.json" in report["cmd"]
    assert ablation_stages([], [0]) == []


def test_the_report_gives_each_arm_its_interval_and_verdict():
    from tasks.ablation_report import rows, summarize

    runs = {
        "grpo": {
            0: {"test_pass@1": 0.4, "seconds_per_step": 1.0, "peak_memory_mb": 100, "kl_final": 0.01},
            1: {"test_pass@1": 0.5, "seconds_per_step": 1.2, "peak_memory_mb": 110, "kl_final": 0.02},
            2: {"test_pass@1": 0.6, "seconds_per_step": 1.1, "peak_memory_mb": 105, "kl_final": 0.03},
        },
        "rloo": {
            0: {"test_pass@1": 0.7, "seconds_per_step": 1.0, "peak_memory_mb": 100, "kl_final": None},
            1: {"test_pass@1": 0.8, "seconds_per_step": 1.0, "peak_memory_mb": 100, "kl_final": None},
            2: {"test_pass@1": 0.9, "seconds_per_step": 1.0, "peak_memory_mb": 100, "kl_final": None},
        },
    }
    result = summarize(runs)
    assert result["baseline"] == "grpo" and result["seeds"] == {"grpo": [0, 1, 2], "rloo": [0, 1, 2]}
    assert (
        result["arms"]["grpo"]["test_pass@1"]["mean"] == pytest.approx(0.5) and "kl_final" not in result["arms"]["rloo"]
    )
    assert result["verdicts"]["rloo"]["verdict"] == "better" and "grpo" not in result["verdicts"]
    table = rows(result)
    assert table[0]["vs grpo"] == "baseline" and table[1]["vs grpo"].startswith("better (+0.300, p=0.0213")
    assert table[0]["test_pass@1"] == "0.5 ± 0.1 [0.2516, 0.7484]" and table[1]["kl_final"] == "–"
    assert "forgetting_verdicts" in result and result["forgetting_verdicts"] == {}  # no arm measured it
    assert all("forgetting vs grpo" not in row for row in table)


def test_an_arm_that_forgets_more_is_worse_on_the_forgetting_check():
    from tasks.ablation_report import rows, summarize

    # held-out loss increase: grpo 0.02 ± 0.01, ref_sync 0.08 ± 0.01 (n 3): Welch t = 7.35, df 4 -> p = 0.0018
    runs = {
        "grpo": {s: {"test_pass@1": 0.4 + 0.1 * s, "heldout_loss_increase": 0.01 + 0.01 * s} for s in range(3)},
        "ref_sync": {s: {"test_pass@1": 0.4 + 0.1 * s, "heldout_loss_increase": 0.07 + 0.01 * s} for s in range(3)},
        "old": {s: {"test_pass@1": 0.5 + 0.01 * s} for s in range(2)},
    }  # metrics from before the check existed
    result = summarize(runs)
    forgetting = result["forgetting_verdicts"]
    assert set(forgetting) == {"ref_sync"} and forgetting["ref_sync"]["verdict"] == "worse"
    assert forgetting["ref_sync"]["p_value"] == pytest.approx(0.0018, abs=2e-4)
    assert result["verdicts"]["ref_sync"]["verdict"] == "tie"  # the same pass@1
    table = rows(result)
    assert [row["forgetting vs grpo"] for row in table] == ["baseline", forgetting_cell(forgetting["ref_sync"]), "–"]
    assert table[1]["forgetting vs grpo"].startswith("worse (+0.060, p=0.00")


def forgetting_cell(v: dict) -> str:
    return f"{v['verdict']} ({v['difference']:+.3f}, p={v['p_value']:.3g})"


def test_a_gate_failure_ends_the_ablation_failed_with_one_line_and_no_traceback(monkeypatch, capsys):
    import contextlib

    from flows import ablation as flow
    from flows.stage_run import StageVerdict

    verdict = StageVerdict("stage 'prepare' failed with exit code 3: prepare: the gate failed")

    def gate_fails(*args, **kwargs):
        raise verdict

    monkeypatch.setattr(flow, "precheck", lambda *a, **k: None)
    monkeypatch.setattr(flow, "held_workspace", lambda *a, **k: contextlib.nullcontext(None))
    monkeypatch.setattr(flow, "run_stages", gate_fails)
    state = flow.ablation.fn("params/default.yaml", ["grpo", "ppo"], [0])
    # returned, not raised: Prefect logs a returned Failed state's message, without a traceback
    assert state.is_failed() and state.message == str(verdict)

    monkeypatch.setattr(flow, "ablation", gate_fails)
    monkeypatch.setattr(flow.serve, "prefect_api", contextlib.nullcontext)
    assert flow.main(["--arms", "grpo", "ppo"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: {verdict}\n"


@pytest.mark.parametrize("module", ["ablation", "tune"])
def test_a_smoke_run_refuses_a_bad_arm_before_it_copies_the_checkout(monkeypatch, capsys, module):
    """`make ablation SMOKE=1 ARMS="grpo ppx"` copied the checkout and started the flow in the copy first."""
    import importlib

    flow = importlib.import_module(f"flows.{module}")
    copied = []
    monkeypatch.setattr(flow, "rehearse", lambda *a, **k: copied.append(a) or 0)
    assert flow.main(["--smoke", "--arms", "grpo", "ppx"]) == 2  # a usage error
    assert not copied and "ppx" in capsys.readouterr().err
    assert flow.main(["--smoke", "--arms", "grpo", "ppo"]) == 0 and len(copied) == 1  # good arms: on to the copy
