"""Preflight: the verdict follows the share of groups whose rewards differ, with the evidence."""

from __future__ import annotations

import pytest

from grpoflow.config import ModelConfig, RLConfig
from grpoflow.models.modeling import build_tiny_model, train_tokenizer
from grpoflow.models.prompting import Prompter
from grpoflow.rl.preflight import NONE, OK, WEAK, run_preflight
from grpoflow.rl.rewards import RewardComponent, WeightedReward
from grpoflow.rollout.hf import HFRolloutEngine

ROWS = [{"prompt": f"Tom has {a} apples. How many?", "reference_answer": str(a)} for a in range(12)]


@pytest.fixture(scope="module")
def engine():
    tok = train_tokenizer([r["prompt"] + " #### " + r["reference_answer"] for r in ROWS] * 5, vocab_size=96)
    model = build_tiny_model(
        ModelConfig(hidden_size=32, num_layers=1, num_heads=1, intermediate_size=64, max_length=64), tok, 0
    )
    return HFRolloutEngine(model, tok), Prompter(tok)


def _run(engine, score, **rl):
    """``score(text, row)`` as the reward and as the correctness check."""
    eng, prompter = engine
    cfg = RLConfig(
        num_generations=4,
        sampling={"temperature": 1.0, "max_completion_length": 6},
        preflight={"prompts": 6, **rl.pop("preflight", {})},
        **rl,
    )
    batch = lambda c, rows: [score(x, r) for x, r in zip(c, rows)]  # noqa: E731
    return run_preflight(
        eng, prompter.prompt, WeightedReward([RewardComponent("r", batch, 1.0)]), batch, ROWS, cfg, seed=0
    )


def test_no_group_with_unequal_rewards_is_none_with_remedies(engine):
    result = _run(engine, lambda text, row: 0.0)
    assert result.verdict == NONE and result.signal == 0.0 and result.pass_at_g == 0.0
    assert any("easier data" in r for r in result.remedies) and any("G=4" in r for r in result.remedies)
    assert result.prompts == 6 and result.group_size == 4 and "Preflight: NONE" in result.report()


def test_mixed_groups_are_ok_and_a_few_are_weak(engine):
    varied = _run(engine, lambda text, row: float(len(text) % 2))
    assert varied.verdict == OK and varied.signal > 0.25 and varied.remedies == []
    # Only even references can be rewarded: their groups may differ, the odd ones' cannot.
    some = _run(
        engine,
        lambda text, row: float(len(text) % 2) * (int(row["reference_answer"]) % 2 == 0),
        preflight={"min_signal": 1.0},
    )
    assert some.verdict == WEAK and 0 < some.signal < 1 and some.remedies


def test_the_sample_is_fixed_by_the_seed(engine):
    a, b = _run(engine, lambda text, row: float(len(text) % 3)), _run(engine, lambda text, row: float(len(text) % 3))
    assert a.to_dict() == b.to_dict()
