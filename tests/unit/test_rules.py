"""The cross-field rules (grpoflow/config/rules.py): each refuses a set that breaks it, naming the keys,
and passes one that keeps it; every algorithm the set trains and every ablation arm is checked."""

import subprocess
import sys

import pytest

from grpoflow.algorithms.grpo.config import GRPOConfig
from grpoflow.config import ConfigError, Params, RLConfig, rules, validate_params

GRPO_ONLY = {"experiment": {"stages": ["base_model", "prepare", "validate_verifiers", "sft", "grpo"]}}
PPO_ONLY = {"experiment": {"stages": ["base_model", "prepare", "validate_verifiers", "sft", "ppo"]}}
# The ablation's shared stages: no grpo or ppo stage of its own.
NO_RL = {"experiment": {"stages": ["base_model", "prepare", "validate_verifiers", "sft"]}}


def refused(raw: dict, *keys: str) -> str:
    """The error for ``raw``, checked to name each of ``keys``."""
    with pytest.raises(ConfigError) as info:
        validate_params(raw)
    for key in keys:
        assert key in str(info.value)
    return str(info.value)


def test_the_default_set_and_every_committed_set_break_no_rule():
    from pathlib import Path

    from grpoflow.config import load_params

    rules.check(Params())
    for path in sorted(Path("params").glob("*.yaml")):
        rules.check(load_params(path))


def test_the_trained_algorithms_follow_the_stages():
    assert rules.trained_algorithms(Params()) == ["grpo", "ppo"]
    assert rules.trained_algorithms(validate_params(GRPO_ONLY)) == ["grpo"]
    assert rules.trained_algorithms(validate_params(PPO_ONLY)) == ["ppo"]
    assert rules.trained_algorithms(validate_params(NO_RL)) == []


def test_each_algorithm_reads_its_own_kl_coefficient():
    p = validate_params({"grpo": {"beta": 0.0}, "ppo": {"kl_coef": 0.07}, **PPO_ONLY})
    assert (rules.kl_coef(p, "grpo"), rules.kl_coef(p, "ppo")) == (0.0, 0.07)
    assert not rules.needs_reference(p, "grpo") and rules.needs_reference(p, "ppo")


def test_batch_arithmetic():
    refused(
        {"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 16}}},
        "rl.prompts_per_step",
        "rl.engine.micro_batch_size=16",
    )
    validate_params({"rl": {"prompts_per_step": 4, "num_generations": 4, "engine": {"micro_batch_size": 16}}})


def test_greedy_sampling():
    refused({"rl": {"sampling": {"temperature": 0.0}}}, "rl.sampling.temperature")
    validate_params({"rl": {"sampling": {"temperature": 0.5}}})


def test_the_overlong_buffer_fits_under_the_cap():
    refused(
        {"rl": {"overlong_buffer": 24, "sampling": {"max_completion_length": 24}}},
        "rl.overlong_buffer=24",
        "rl.sampling.max_completion_length=24",
    )
    validate_params({"rl": {"overlong_buffer": 23, "sampling": {"max_completion_length": 24}}})


def test_duplicate_reward_names_are_refused():
    # The hole: the second 'math' overwrote the first one's scores while the first one's options judged.
    message = refused(
        {
            "rewards": [
                {"name": "math", "options": {"fallback_last_number": False}},
                {"name": "format", "weight": 0.1},
                {"name": "math", "weight": 0.5},
            ]
        },
        "rewards.2.name",
        "rewards.0.name",
    )
    assert "'math'" in message
    refused({"rewards": [{"name": "rm"}, {"name": "rm", "path": "models/other_rm"}]}, "rewards.1.name")
    validate_params({"rewards": [{"name": "math"}, {"name": "format", "weight": 0.1}]})


def test_a_lora_reference_is_not_refreshed():
    refused({"rl": {"ref_sync_every": 10}, "model": {"lora": {"rank": 4}}}, "rl.ref_sync_every", "model.lora")
    validate_params({"rl": {"ref_sync_every": 10}})
    validate_params({"model": {"lora": {"rank": 4}}})


def test_the_adaptive_horizon_keeps_the_coefficient_positive():
    from grpoflow.rl.trainer import adapt_beta

    assert adapt_beta(0.04, kl=0.0, target=0.02, horizon=2) <= 0  # why: one step to 0
    assert adapt_beta(0.04, kl=0.0, target=0.02, horizon=rules.MIN_ADAPTIVE_HORIZON) > 0
    refused({"rl": {"adaptive_kl": {"enabled": True, "horizon": 2}}}, "rl.adaptive_kl.horizon=2")
    validate_params({"rl": {"adaptive_kl": {"enabled": True, "horizon": 3}}})
    validate_params({"rl": {"adaptive_kl": {"enabled": False, "horizon": 1}}})  # off: the horizon is unused


def test_adaptive_kl_needs_the_trained_algorithms_own_coefficient():
    # The hole: GRPO with beta 0 passed because PPO's default coefficient (0.04) was > 0.
    on = {"rl": {"adaptive_kl": {"enabled": True}}}
    message = refused({**on, "grpo": {"beta": 0.0}}, "rl.adaptive_kl", "grpo.beta")
    assert "ppo.kl_coef" not in message
    refused({**on, "ppo": {"kl_coef": 0.0}}, "rl.adaptive_kl", "ppo.kl_coef")
    refused({**on, "grpo": {"beta": 0.0}, **GRPO_ONLY}, "grpo.beta")
    validate_params({**on, "grpo": {"beta": 0.0}, **PPO_ONLY})  # GRPO is not trained: its beta does not matter
    validate_params({**on, "ppo": {"kl_coef": 0.0}, **GRPO_ONLY})
    validate_params(on)


def test_a_reference_refresh_needs_a_reference():
    # The hole: rl.ref_sync_every with grpo.beta 0 was accepted, and refreshed nothing.
    every = {"rl": {"ref_sync_every": 5}}
    refused({**every, "grpo": {"beta": 0.0}}, "rl.ref_sync_every=5", "grpo.beta")
    refused({**every, "ppo": {"kl_coef": 0.0}}, "rl.ref_sync_every=5", "ppo.kl_coef")
    validate_params({**every, "ppo": {"kl_coef": 0.0}, **GRPO_ONLY})
    validate_params(every)


def test_kl_in_the_reward_needs_grpo_beta():
    refused({"grpo": {"beta": 0.0, "kl_placement": "reward"}}, "grpo.kl_placement", "grpo.beta")
    validate_params({"grpo": {"beta": 0.0, "kl_placement": "reward"}, **PPO_ONLY})
    validate_params({"grpo": {"kl_placement": "reward"}})


def test_each_ablation_arm_is_checked_on_its_merged_params_for_its_own_algorithm():
    # dapo's preset sets grpo.beta 0: its arm cannot refresh a reference, though the set itself trains none.
    message = refused(
        {**NO_RL, "rl": {"ref_sync_every": 5}, "ablation": {"arms": ["grpo", "dapo"]}},
        "ablation arm 'dapo'",
        "rl.ref_sync_every=5",
        "grpo.beta",
    )
    assert "arm 'grpo'" not in message
    validate_params({**NO_RL, "rl": {"ref_sync_every": 5}, "ablation": {"arms": ["grpo", "ppo"]}})
    # A PPO arm reads ppo.kl_coef, whatever grpo.beta says.
    custom = {"arms": ["mine"], "custom_arms": {"mine": {"algorithm": "ppo", "overrides": {"ppo.kl_coef": 0.0}}}}
    on = {"rl": {"adaptive_kl": {"enabled": True}}}
    refused({**NO_RL, **on, "ablation": custom}, "ablation arm 'mine'", "ppo.kl_coef")
    # An arm's override the schema refuses is found at load, not when the arm's stage starts.
    bad = {"arms": ["typo"], "custom_arms": {"typo": {"overrides": {"rl.stepz": 3}}}}
    refused({**NO_RL, "ablation": bad}, "ablation arm 'typo'", "rl.stepz")


def test_check_lists_every_violation_at_once():
    message = refused(
        {
            "rl": {"sampling": {"temperature": 0.0}, "ref_sync_every": 5},
            "grpo": {"beta": 0.0},
            "rewards": [{"name": "math"}, {"name": "math"}],
        },
        "rl.sampling.temperature",
        "rl.ref_sync_every",
        "rewards.1.name",
    )
    assert len(message.splitlines()) == 1 + 3  # the file's line, then one line per broken rule
    # A set built around the schema's validators: check() itself still refuses it, listing each problem.
    broken = Params.model_construct(grpo=GRPOConfig(beta=0.0), rl=RLConfig(ref_sync_every=5))
    with pytest.raises(rules.RulesBroken) as info:
        rules.check(broken)
    assert isinstance(info.value, ConfigError)
    assert len(info.value.problems) == 1 and "grpo.beta" in info.value.problems[0]


def test_the_rules_and_the_schema_load_without_torch():
    code = (
        "import sys; import grpoflow.config.rules, grpoflow.config; grpoflow.config.Params(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_critic_warmup_leaves_steps_that_update_the_policy():
    # The warm-up counts against rl.steps: a warm-up as long as the run would train no policy at all.
    refused({"rl": {"steps": 10}, "ppo": {"critic_warmup_steps": 10}}, "ppo.critic_warmup_steps=10", "rl.steps=10")
    validate_params({"rl": {"steps": 10}, "ppo": {"critic_warmup_steps": 9}})
    validate_params({"rl": {"steps": 10}, "ppo": {"critic_warmup_steps": 10}, **GRPO_ONLY})  # PPO is not trained


def test_a_critic_from_the_reward_model_needs_one_in_the_rewards():
    refused({"ppo": {"critic_init": "reward_model"}}, "ppo.critic_init", "rewards")
    validate_params({"ppo": {"critic_init": "reward_model"}, "rewards": [{"name": "math"}, {"name": "rm"}]})


def test_a_critic_warm_up_that_leaves_no_policy_step_is_refused_with_a_setting_that_holds():
    import re

    message = refused({"rl": {"steps": 3}, "ppo": {"critic_warmup_steps": 14}}, "ppo.critic_warmup_steps=14")
    (suggested,) = re.findall(r"--set ppo\.critic_warmup_steps=(\d+)", message)
    validate_params({"rl": {"steps": 3}, "ppo": {"critic_warmup_steps": int(suggested)}})  # the fix it names holds
    validate_params({"rl": {"steps": 3}, "ppo": {"critic_warmup_steps": 14}, **GRPO_ONLY})  # no PPO: no rule
