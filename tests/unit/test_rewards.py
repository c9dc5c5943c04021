"""The training loop's parts, on hand-made inputs."""


import torch

from grpoflow.rewards import RewardComponent, WeightedReward


def test_weighted_reward_keeps_each_component():
    reward = WeightedReward([
        RewardComponent("a", lambda c, r: [1.0 if x == y else 0.0 for x, y in zip(c, r)], 1.0),
        RewardComponent("b", lambda c, r: [0.5] * len(c), 0.2),
    ])
    total, parts = reward(["x", "y"], ["x", "z"])
    assert torch.allclose(total, torch.tensor([1.1, 0.1]))
    assert parts["a"].tolist() == [1.0, 0.0]


def test_the_reward_runs_code_with_the_params_sandbox_limits():
    # Training used to build the code verifier with default limits, ignoring `sandbox` (and with it
    # allow_unsandboxed): the reward must be built from the params' own sandbox section.
    from grpoflow.config import validate_params
    from grpoflow.rewards import build_reward, create_verifier

    params = validate_params({"rewards": [{"name": "code"}], "sandbox": {"wall_seconds": 1.5, "workers": 1,
                                                                        "allow_unsandboxed": True}})
    assert create_verifier(params, "code").sandbox == params.sandbox
    component = build_reward(params).components[0]
    assert component.score.__self__.sandbox.wall_seconds == 1.5


def test_dapo_overlong_punishment_by_hand():
    import pytest

    from grpoflow.rewards import overlong_penalty

    lengths = torch.tensor([10, 12, 14, 16, 20])  # cap 16, buffer 4: the ramp runs over 12..16
    assert torch.allclose(overlong_penalty(lengths, 16, 4, penalty=0.5), torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5]))
    with pytest.raises(ValueError, match="overlong buffer"):
        overlong_penalty(lengths, 16, 16)


def test_the_overlong_buffer_must_fit_under_the_length_cap():
    import pytest

    from grpoflow.config import ConfigError, validate_params

    with pytest.raises(ConfigError, match="overlong_buffer"):
        validate_params({"rl": {"overlong_buffer": 64, "sampling": {"max_completion_length": 64}}})
