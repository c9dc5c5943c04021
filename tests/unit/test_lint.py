"""The training loop's parts, on hand-made inputs."""



from grpoflow.config import validate_params
from grpoflow.lint import lint


def test_lint_reports_differences_and_batches_that_do_not_split_over_the_processes():
    params = validate_params({"rl": {"prompts_per_step": 6, "num_generations": 4, "engine": {"micro_batch_size": 8}}})
    errors = [f.message for f in lint(params, "grpo", world_size=4) if f.level == "error"]
    assert errors == ["rl.prompts_per_step=6 is not divisible by 4 processes"]
    errors = [f.message for f in lint(params, "grpo", world_size=2) if f.level == "error"]
    assert errors == ["12 sequences per process (rl.prompts_per_step / 2 processes x G=4) are not a multiple of "
                      "rl.engine.micro_batch_size=8"]
    infos = [f.message for f in lint(params, "grpo") if f.level == "info"]
    assert any("DeepSeekMath: 64" in m for m in infos) and any("TRL default: 0.0" in m for m in infos)
    assert not any("grpo.beta" in f.message for f in lint(params, "ppo"))  # PPO is compared on the shared budget only
    assert not [f for f in lint(validate_params({}), "grpo", 1) if f.level == "error"]
