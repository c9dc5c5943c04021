"""The training loop's parts, on hand-made inputs."""

import torch

from grpoflow.rl.rewards import RewardComponent, WeightedReward


def test_weighted_reward_keeps_each_component():
    reward = WeightedReward(
        [
            RewardComponent("a", lambda c, r: [1.0 if x == y else 0.0 for x, y in zip(c, r)], 1.0),
            RewardComponent("b", lambda c, r: [0.5] * len(c), 0.2),
        ]
    )
    total, parts = reward(["x", "y"], ["x", "z"])
    assert torch.allclose(total, torch.tensor([1.1, 0.1]))
    assert parts["a"].tolist() == [1.0, 0.0]


def test_the_reward_runs_code_with_the_params_sandbox_limits():
    # Training used to build the code verifier with default limits, ignoring `sandbox` (and with it
    # allow_unsandboxed): the reward must be built from the params' own sandbox section.
    from grpoflow.config import validate_params
    from grpoflow.rl.rewards import build_reward, create_verifier

    params = validate_params(
        {"rewards": [{"name": "code"}], "sandbox": {"wall_seconds": 1.5, "workers": 1, "allow_unsandboxed": True}}
    )
    assert create_verifier(params, "code").sandbox == params.sandbox
    component = build_reward(params).components[0]
    assert component.score.__self__.sandbox.wall_seconds == 1.5


def test_dapo_overlong_punishment_by_hand():
    import pytest

    from grpoflow.rl.rewards import overlong_penalty

    lengths = torch.tensor([10, 12, 14, 16, 20])  # cap 16, buffer 4: the ramp runs over 12..16
    assert torch.allclose(overlong_penalty(lengths, 16, 4, penalty=0.5), torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5]))
    with pytest.raises(ValueError, match="overlong buffer"):
        overlong_penalty(lengths, 16, 16)


def test_the_overlong_buffer_must_fit_under_the_length_cap():
    import pytest

    from grpoflow.config import ConfigError, validate_params

    with pytest.raises(ConfigError, match="overlong_buffer"):
        validate_params({"rl": {"overlong_buffer": 64, "sampling": {"max_completion_length": 64}}})


class _Verifier:
    """A stand-in verifier: scores each completion's length, and records the rows it saw."""

    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, completions, rows):
        self.seen += [r["id"] for r in rows]
        return [float(len(c)) for c in completions]


def test_each_component_scores_only_the_rows_of_its_tasks():
    code, math, everything = _Verifier(), _Verifier(), _Verifier()
    reward = WeightedReward(
        [
            RewardComponent("code", code, 1.0, frozenset({"code"})),
            RewardComponent("math", math, 2.0, frozenset({"math"})),
            RewardComponent("rm", everything, 0.5),
        ]
    )
    rows = [{"id": "a", "task": "code"}, {"id": "b"}, {"id": "c", "task": "math"}]  # no task: a math row
    total, parts = reward(["x", "yy", "zzz"], rows)
    assert code.seen == ["a"] and math.seen == ["b", "c"] and everything.seen == ["a", "b", "c"]
    assert parts["code"].tolist() == [1.0, 0.0, 0.0] and parts["math"].tolist() == [0.0, 2.0, 3.0]
    assert torch.allclose(total, torch.tensor([1 + 0.5, 4 + 1.0, 6 + 1.5]))


class _Shift:
    """A normaliser that subtracts the running count of scores seen: state that must survive a resume."""

    def __init__(self):
        self.n = 0

    def update_and_normalize(self, x):
        self.n += len(x)
        return x - self.n

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


def test_normalised_components_keep_their_state_across_a_resume():
    def make():
        return WeightedReward(
            [
                RewardComponent("rm", lambda c, r: [1.0] * len(c), 1.0, None, _Shift()),
                RewardComponent("plain", lambda c, r: [1.0] * len(c), 1.0),
            ]
        )

    first = make()
    first(["a", "b"], [{}, {}])
    assert first.state_dict() == {"rm": {"n": 2}}
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    _, parts = resumed(["c"], [{}])
    assert parts["rm"].tolist() == [1.0 - 3] and parts["plain"].tolist() == [1.0]


def test_correctness_takes_each_row_to_its_task_judge_and_is_binary():
    # A code row is right only when every test passes (the code verifier's accepts), a math row by
    # evaluate.verifier's; a reward model never judges correctness.
    from grpoflow.config import validate_params
    from grpoflow.rl.rewards import correctness_scorer, judge_name

    params = validate_params(
        {"rewards": [{"name": "rm"}, {"name": "format"}, {"name": "math"}], "sandbox": {"allow_unsandboxed": True}}
    )
    assert judge_name(params, "code") == "code" and judge_name(params, "math") == "format"
    assert judge_name(validate_params({"rewards": [{"name": "rm"}]}), "math") == "math"
    score = correctness_scorer(validate_params({"sandbox": {"allow_unsandboxed": True}}))
    rows = [
        {"id": "m", "reference_answer": "7", "prompt": "3+4?"},
        {
            "id": "c",
            "task": "code",
            "reference_answer": "",
            "prompt": "add",
            "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"],
        },
    ]
    half = "```python\ndef add(a, b):\n    return 3 if a == 1 else 4\n```"  # passes 2 of 3 tests
    assert score(["#### 7", half], rows) == [1.0, 0.0]
    assert score(["#### 8", "```python\ndef add(a, b):\n    return a + b\n```"], rows) == [0.0, 1.0]


def test_a_reward_model_cannot_rank_its_own_training_samples():
    import pytest

    from grpoflow.config import validate_params
    from grpoflow.rl.rewards import build_reward

    with pytest.raises(ValueError, match="no verifier"):
        build_reward(validate_params({"rewards": [{"name": "rm"}]}), models=False)
