"""The verifier gate's reward-model checks, on hand-made rows and a tiny model folder."""

from __future__ import annotations

import pytest

from grpoflow.config import validate_params
from tasks.validate_verifiers import perturbed_solution, reward_model_gate, rm_failures

MATH_ROW = {"id": "m", "prompt": "48/2?", "reference_answer": "24", "solution": "48/2=24\n#### 24"}
CODE_ROW = {
    "id": "c",
    "task": "code",
    "prompt": "Write f(x) returning x plus 3.",
    "reference_answer": "",
    "solution": "def f(x):\n    return x + 3",
    "tests": ["assert f(1) == 4"],
}


def test_a_perturbed_solution_is_the_gold_one_made_wrong():
    wrong = perturbed_solution(MATH_ROW)
    assert wrong.startswith("48/2=24\n#### ") and wrong != MATH_ROW["solution"] and "#### 24" not in wrong
    assert perturbed_solution(CODE_ROW) == "def f(x):\n    return x + 4"  # the first mutant: a wrong constant
    assert perturbed_solution({**MATH_ROW, "solution": None}) is None
    assert perturbed_solution({**MATH_ROW, "solution": "24"}) is None  # no final-answer line to change


def test_the_reward_model_gate_names_each_failure():
    params = validate_params(
        {"rewards": [{"name": "rm"}], "verifier_gate": {"min_rm_accuracy": 0.7, "min_rm_win_rate": 0.9}}
    )
    assert rm_failures({"win_rate": 0.95, "cases": 20, "heldout_accuracy": 0.8}, params) == []
    failures = rm_failures({"win_rate": 0.5, "cases": 20, "heldout_accuracy": 0.6}, params)
    assert [f.split(" < ")[1] for f in failures] == [
        "verifier_gate.min_rm_win_rate 0.9",
        "verifier_gate.min_rm_accuracy 0.7",
    ]
    # An RM from elsewhere has no held-out accuracy here: it is judged on the win rate alone.
    assert rm_failures({"win_rate": 0.95, "cases": 20}, params) == []
    assert rm_failures({"error": "no val row has a gold solution to perturb"}, params) == [
        "rm: no val row has a gold solution to perturb"
    ]


def test_a_path_that_is_no_reward_model_fails_the_gate_before_training(tmp_path):
    from grpoflow.config import ModelConfig
    from grpoflow.models.modeling import build_tiny_model, save_pretrained, train_tokenizer

    tok = train_tokenizer(["def f(x):\n    return x + 3", "48/2=24\n#### 24"], vocab_size=280)
    policy = build_tiny_model(
        ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_length=64), tok, seed=0
    )
    save_pretrained(policy, tok, tmp_path / "policy")
    params = validate_params({"rewards": [{"name": "code"}, {"name": "rm", "path": str(tmp_path / "policy")}]})
    result = reward_model_gate(params, [MATH_ROW, CODE_ROW], tmp_path / "absent.json")
    assert "heldout_accuracy" not in result and "ForSequenceClassification" in result["error"]
    (failure,) = rm_failures(result, params)
    assert str(tmp_path / "policy") in failure and "not a reward model" in failure


@pytest.mark.parametrize("rows", [[], [{**MATH_ROW, "solution": ""}]])
def test_no_gold_solution_to_perturb_is_a_failure_not_a_pass(rows, tmp_path):
    params = validate_params({"rewards": [{"name": "rm", "path": str(tmp_path)}]})
    assert reward_model_gate(params, rows, tmp_path / "absent.json")["error"].startswith("no val row")


def test_cases_by_kind_are_one_table_not_a_chart_each():
    from tasks.validate_verifiers import kinds_table

    summary = {
        "math.val": {"accuracy": 1.0, "by_kind": {"gold:boxed": {"accepted": 3, "rejected": 0}}},
        "format.val": {"accuracy": 1.0, "by_kind": {"malformed": {"accepted": 0, "rejected": 5}}},
    }
    assert kinds_table(summary) == {
        "verifier": ["math.val", "format.val"],
        "kind": ["gold:boxed", "malformed"],
        "accepted": [3, 0],
        "rejected": [0, 5],
    }


def test_the_report_training_depends_on_changes_with_the_verdict_not_the_timings():
    """#51: re-validating unchanged verifiers staled every training stage through checks/s in this file."""
    from tasks.validate_verifiers import report

    def result(speed: float, precision: float = 1.0) -> dict:
        return {
            "cases": 10,
            "precision": precision,
            "recall": 1.0,
            "accuracy": 1.0,
            "checks_per_second": speed,
            "confusions": [],
            "reference_errors": [],
        }

    slow, fast = {"math.val": result(100.0)}, {"math.val": result(250.5)}
    assert report(slow, [], timings=False) == report(fast, [], timings=False)
    assert "checks/s" not in report(slow, [], timings=False) and "250.5" in report(fast, [])
    assert report({"math.val": result(100.0, 0.9)}, [], timings=False) != report(slow, [], timings=False)
