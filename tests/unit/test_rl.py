"""The training loop's parts, on hand-made inputs."""

import pytest

from grpoflow.rl.step_batch import prompt_indices
from grpoflow.rl.trainer import adapt_beta


def test_prompt_indices_cover_every_prompt_once_per_epoch_and_are_reproducible():
    seen = [i for step in range(5) for i in prompt_indices(20, 4, step, seed=3)]
    assert sorted(seen) == list(range(20))
    assert prompt_indices(20, 4, 7, seed=3) == prompt_indices(20, 4, 7, seed=3)
    assert prompt_indices(20, 4, 0, seed=3) != prompt_indices(20, 4, 0, seed=4)
    assert len(prompt_indices(3, 8, 0, seed=0)) == 8  # wraps into the next epoch


def test_adaptive_beta_moves_toward_the_target():
    assert adapt_beta(0.04, kl=0.1, target=0.02, horizon=10) > 0.04
    assert adapt_beta(0.04, kl=0.001, target=0.02, horizon=10) < 0.04
    assert adapt_beta(0.04, kl=0.02, target=0.02, horizon=10) == pytest.approx(0.04)
    assert adapt_beta(0.04, kl=100.0, target=0.02, horizon=10) == pytest.approx(0.04 * 1.2)  # error clipped


def test_dynamic_sampling_keeps_groups_of_unequal_rewards_and_fills_up_with_the_rest():
    import torch

    from grpoflow import metric_names as M
    from grpoflow.config import validate_params
    from grpoflow.rl.batch import Scored
    from grpoflow.rl.loop_state import LoopState
    from grpoflow.rl.ranks import Ranks
    from grpoflow.rl.step_batch import StepBatches
    from grpoflow.rl.step_timing import PhaseTimer
    from grpoflow.rollout import Rollouts

    def batch(tag: str, rewards: list[float]) -> Scored:
        n = len(rewards)
        ro = Rollouts(
            torch.zeros(n, 1, dtype=torch.long),
            torch.ones(n, 1, dtype=torch.long),
            torch.zeros(n, 1, dtype=torch.long),
            torch.ones(n, 1, dtype=torch.long),
            [f"{tag}{i}" for i in range(n)],
            torch.zeros(n, dtype=torch.bool),
        )
        return Scored(
            ro, [{"id": f"{tag}{i // 2}"} for i in range(n)], torch.tensor(rewards), {"math": torch.tensor(rewards)}
        )

    # G = 2, two groups per step. First draw: equal, unequal; the next ones: unequal, equal / equal, equal.
    draws = {1: batch("b", [1.0, 0.0, 1.0, 1.0]), 2: batch("c", [0.0, 0.0, 0.0, 0.0])}

    def batches(cfg) -> StepBatches:
        """The step's batches, their draws of rollouts and rewards made up (a process of one)."""
        tok = type("Tok", (), {"pad_token_id": 0})()
        out = StepBatches(
            cfg, None, tok, None, [], prompter=None, seed=0, ranks=Ranks(), state=LoopState(), timer=PhaseTimer()
        )
        out.scored = lambda step, g, draw=0: draws[draw]
        return out

    for max_draws, texts, dropped in ((1, ["a2", "a3", "b0", "b1"], 0.5), (2, ["a2", "a3", "b0", "b1"], 0.5)):
        cfg = validate_params({"rl": {"dynamic_sampling": {"enabled": True, "max_draws": max_draws}}}).rl
        chosen, m = batches(cfg).informative(0, 2, batch("a", [0.0, 0.0, 1.0, 0.0]))
        assert chosen.rollouts.texts == texts and chosen.total.tolist() == [1.0, 0.0, 1.0, 0.0]
        assert m == {M.DYNAMIC_SAMPLING_DRAWS: 1.0, M.FRAC_DROPPED_GROUPS: dropped}  # enough after one draw

    # Nothing informative anywhere: every draw up to the cap, then the step is filled with equal groups.
    cfg = validate_params({"rl": {"dynamic_sampling": {"enabled": True, "max_draws": 1}}}).rl
    draws[1] = batch("b", [1.0, 1.0, 0.0, 0.0])
    chosen, m = batches(cfg).informative(0, 2, batch("a", [0.0, 0.0, 1.0, 1.0]))
    assert chosen.rollouts.texts == ["a0", "a1", "a2", "a3"]
    assert m == {M.DYNAMIC_SAMPLING_DRAWS: 1.0, M.FRAC_DROPPED_GROUPS: 0.5}
