"""The shared-prefix benchmark's pad-share accounting, on a hand-made batch."""

from __future__ import annotations

import torch

from benchmarks.bench_shared_prefix import _pad_share
from tests.unit.test_shared_prefix import tiny_default


def test_pad_share_of_each_way_by_hand():
    # two groups: prompt [5, 6] (left-padded to 3) x 2, prompt [7, 8, 9] x 1; completions 3, 2, 3
    ids = torch.tensor([[1, 5, 6, 10, 11, 12], [1, 5, 6, 13, 14, 1], [7, 8, 9, 15, 16, 17]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    model = tiny_default()
    # rows: 3 x 6 cells, 15 of them tokens
    assert _pad_share(model, ids, attn, 3, "rows") == (18, round(1 - 15 / 18, 3))
    # the tokens a packed pass needs: prompts 2 + 3, fed completion tokens 2 + 1 + 2 = 10
    # slots: group 0 is 3 + 2 slots x 2 wide = 7, both rows 7 wide
    assert _pad_share(model, ids, attn, 3, "slots") == (14, round(1 - 10 / 14, 3))
    # packed: group 0 3 + 2 + 1 = 6, group 1 3 + 2 = 5, both rows 6 wide
    assert _pad_share(model, ids, attn, 3, "packed") == (12, round(1 - 10 / 12, 3))
