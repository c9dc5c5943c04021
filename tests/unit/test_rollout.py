"""The training loop's parts, on hand-made inputs."""


import torch

from grpoflow.rollout import completion_mask


def test_completion_mask_includes_eos_and_flags_truncation():
    ids = torch.tensor([[5, 6, 0, 9, 9], [5, 6, 7, 8, 4], [0, 9, 9, 9, 9]])
    mask, truncated = completion_mask(ids, 0)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]
