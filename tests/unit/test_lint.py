"""The training loop's parts, on hand-made inputs."""

from grpoflow.config import validate_params
from grpoflow.config.advice import lint


def test_lint_reports_differences_and_batches_that_do_not_split_over_the_processes():
    params = validate_params({"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 8}}})
    errors = [f.message for f in lint(params, "grpo", world_size=4) if f.level == "error"]
    assert errors == ["rl.prompts_per_step=6 is not divisible by 4 processes"]
    errors = [f.message for f in lint(params, "grpo", world_size=2) if f.level == "error"]
    assert errors == [
        "12 sequences per process (rl.prompts_per_step / 2 processes x G=4) are not a multiple of "
        "rl.engine.micro_batch_size=8"
    ]
    infos = [f.message for f in lint(params, "grpo") if f.level == "info"]
    assert any("DeepSeekMath: 64" in m for m in infos) and any("TRL default: 0.0" in m for m in infos)
    assert not any("grpo.beta" in f.message for f in lint(params, "ppo"))  # PPO is compared on the shared budget only
    assert not [f for f in lint(validate_params({}), "grpo", 1) if f.level == "error"]


def test_each_estimator_and_shaping_option_says_where_it_departs_from_the_paper():
    from grpoflow.config import validate_params
    from grpoflow.config.advice import lint

    params = validate_params(
        {
            "grpo": {"advantage_estimator": "rloo", "kl_estimator": "k1", "kl_placement": "reward"},
            "rl": {"entropy_coef": 0.01, "overlong_buffer": 8},
        }
    )
    lines = {f.message for f in lint(params, "grpo")}
    for expected in (
        "grpo.advantage_estimator = rloo (DeepSeekMath: grpo)",
        "grpo.kl_estimator = k1 (DeepSeekMath: k3)",
        "grpo.kl_placement = reward (DeepSeekMath: loss)",
        "rl.entropy_coef = 0.01 (DeepSeekMath: 0.0)",
        "rl.overlong_buffer = 8 (DeepSeekMath: 0)",
    ):
        assert expected in lines
    assert not any(
        "kl_estimator" in m or "entropy_coef" in m for m in {f.message for f in lint(validate_params({}), "grpo")}
    )


def test_lint_keeps_advice_and_the_world_size_only_the_rules_are_checked_at_load():
    from grpoflow.config import validate_params
    from grpoflow.config.advice import lint

    # A PPO-only set may leave grpo.beta at 0 with adaptive KL on: it loads, and PPO's check is clean.
    params = validate_params(
        {"experiment": {"stages": ["ppo"]}, "rl": {"adaptive_kl": {"enabled": True}}, "grpo": {"beta": 0.0}}
    )
    assert not [f for f in lint(params, "ppo") if f.level != "info"]
    # GRPO run on it by hand (its stage is not in the set): GRPO's own rules, which loading did not check.
    errors = [f.message for f in lint(params, "grpo") if f.level == "error"]
    assert len(errors) == 1 and "rl.adaptive_kl" in errors[0] and "grpo.beta is 0" in errors[0]
    warnings = [
        f.message for f in lint(validate_params({"rl": {"clip_eps_high": 0.1}}), "grpo") if f.level == "warning"
    ]
    assert warnings == ["rl.clip_eps_high 0.1 < rl.clip_eps 0.2: clip-higher is meant to widen"]  # advice stays
