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


def test_a_seed_listed_twice_is_refused_naming_it_not_as_a_dependency_cycle():
    # Two stages of one name made dvc.yaml's graph fail: "the stages have a dependency cycle among []".
    with pytest.raises(ConfigError, match=r"seeds listed twice: 1 \(in \[1, 1, 2\]\)"):
        validate_params({"ablation": {"arms": ["grpo"], "seeds": [1, 1, 2]}})
    with pytest.raises(ConfigError, match=r"arms listed twice: grpo \(in \['grpo', 'ppo', 'grpo'\]\)"):
        validate_params({"ablation": {"arms": ["grpo", "ppo", "grpo"]}})


def test_a_custom_arm_may_extend_a_built_in_of_its_name_but_not_replace_it():
    # rloo trained as plain GRPO with another beta, reported as rloo: refused, trained or not.
    with pytest.raises(ConfigError, match=r"custom_arms\.rloo: 'rloo' is a built-in arm \(grpo with \{'grpo.adv"):
        validate_params({"ablation": {"custom_arms": {"rloo": {"overrides": {"grpo.beta": 0.5}}}}})
    with pytest.raises(ConfigError, match=r"custom_arms\.ppo: 'ppo' is a built-in arm \(ppo\)"):
        validate_params({"ablation": {"custom_arms": {"ppo": {"algorithm": "grpo"}}}})
    # What a tuned overlay writes: the built-in's algorithm and overrides, and settings added.
    tuned = {"overrides": {"grpo.advantage_estimator": "rloo", "grpo.beta": 0.5}}
    params = validate_params({"ablation": {"arms": ["rloo"], "custom_arms": {"rloo": tuned}}})
    assert (arm_params(params, "rloo").grpo.beta, arm_params(params, "rloo").grpo.advantage_estimator) == (0.5, "rloo")


def test_a_custom_arms_name_is_checked_where_it_is_written_named_in_arms_or_not():
    for name in ("Mine", "my-arm"):
        with pytest.raises(ConfigError, match=rf"custom_arms\.{name}: use lower-case letters, digits and _"):
            validate_params({"ablation": {"arms": ["grpo"], "custom_arms": {name: {}}}})


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


def test_a_mistake_in_arms_or_seeds_is_blamed_on_the_command_line_not_the_params_file(monkeypatch):
    from pathlib import Path

    from flows.ablation import check_flags

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    with pytest.raises(ConfigError, match=r"^--arms grpo gpro --seeds 0: unknown arm 'gpro' \(did you mean 'grpo'\?\)"):
        check_flags("params/default.yaml", ["grpo", "gpro"], [0], None)
    with pytest.raises(ConfigError, match=r"^--arms grpo --seeds 1 1: seeds listed twice: 1 \(in \[1, 1\]\)$"):
        check_flags("params/default.yaml", ["grpo"], [1, 1], None)
    # A custom arm from --set counts as the set's own; the set's own faults stay the file's.
    mine = {"ablation.custom_arms.mine": {"overrides": {"grpo.beta": 0.01}}}
    check_flags("params/default.yaml", ["grpo", "mine"], [0, 1], mine)
    with pytest.raises(ConfigError, match=r"^params/default.yaml: invalid parameters\n.*custom_arms\.Mine"):
        check_flags("params/default.yaml", ["grpo"], [0], {"ablation.custom_arms.Mine": {}})
