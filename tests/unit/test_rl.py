"""The training loop's parts, on hand-made inputs."""


import pytest

from grpoflow.rl import adapt_beta, prompt_indices


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
