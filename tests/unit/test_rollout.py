"""The training loop's parts, on hand-made inputs."""


import torch

from grpoflow.rollout import completion_mask


def test_completion_mask_includes_eos_and_flags_truncation():
    ids = torch.tensor([[5, 6, 0, 9, 9], [5, 6, 7, 8, 4], [0, 9, 9, 9, 9]])
    mask, truncated = completion_mask(ids, 0)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def _rollouts(prompt_width: int, texts: list[str]):
    from grpoflow.rollout import Rollouts

    n = len(texts)
    return Rollouts(torch.arange(n * prompt_width).view(n, prompt_width), torch.ones(n, prompt_width, dtype=torch.long),
                    torch.full((n, 2), 7), torch.ones(n, 2, dtype=torch.long), texts, torch.zeros(n, dtype=torch.bool), 1.5)


def test_rollouts_of_different_prompt_widths_join_left_padded():
    from grpoflow.rollout import concat_rollouts

    a, b = _rollouts(1, ["a0", "a1"]), _rollouts(3, ["b0"])
    joined = concat_rollouts([a.select([1]), b], pad_id=0)
    assert joined.texts == ["a1", "b0"] and joined.seconds == 3.0
    assert joined.prompt_ids.tolist() == [[0, 0, 1], [0, 1, 2]]
    assert joined.prompt_mask.tolist() == [[0, 0, 1], [1, 1, 1]]
    assert joined.completion_ids.shape == (2, 2) and joined.sampler_logprobs is None
