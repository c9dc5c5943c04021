"""Micro-batches by sequences and by token budget (grpoflow.rl.micro_batches)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpoflow.rl import micro_batches as mb
from tests.unit.test_shared_prefix import batch

# tests/unit/test_reference_step.py's batch: prompts 5 and 3 tokens (P = 5), G = 4, completions
# 6 2 4 3 | 5 1 6 2 (C = 6), so fed tokens 5 1 3 2 | 4 0 5 1.
IDS, ATTN, START = batch([5, 3], g=4, c_lens=[6, 2, 4, 3, 5, 1, 6, 2])


def sizes(slices: list[slice]) -> list[int]:
    return [s.stop - s.start for s in slices]


def test_without_a_budget_micro_batches_are_micro_batch_size_rows():
    assert sizes(mb.plan(IDS, ATTN, START, 3, None, packed=True)) == [3, 3, 2]


def test_a_token_budget_by_hand():
    # budget 15: rows 0-2 pack as 5 + 5 + 1 + 3 = 14 (row 3 would make 16); row 3 with row 4 would be
    # two groups of width 5 + 4 (18), so row 3 alone; rows 4-7 pack as 5 + 4 + 0 + 5 + 1 = 15
    assert sizes(mb.plan(IDS, ATTN, START, 8, 15, packed=True)) == [3, 1, 4]
    # unpacked rows cost P + C = 11 each: one per micro-batch under 15, two under 22
    assert sizes(mb.plan(IDS, ATTN, START, 8, 15, packed=False)) == [1] * 8
    assert sizes(mb.plan(IDS, ATTN, START, 8, 22, packed=False)) == [2] * 4
    # a row above the budget still gets a micro-batch of its own; the row cap still holds
    assert sizes(mb.plan(IDS, ATTN, START, 8, 1, packed=True)) == [1] * 8
    assert sizes(mb.plan(IDS, ATTN, START, 2, 10**6, packed=True)) == [2] * 4


def test_loss_scales_weigh_micro_batches_by_their_rows():
    equal = [slice(0, 4), slice(4, 8)]
    assert mb.loss_scales(equal, 2) == [1.0, 1.0]  # DeepSpeed's 1 / 2 undone exactly
    assert mb.loss_scales([slice(0, 3), slice(3, 4), slice(4, 8)], 1) == pytest.approx([3 / 8, 1 / 8, 4 / 8])


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    g=st.integers(1, 5),
    c_lens=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    max_rows=st.integers(1, 12),
    budget=st.integers(1, 80),
    packed=st.booleans(),
    seed=st.integers(0, 50),
)
def test_property_each_micro_batch_fits_its_budget_as_the_packer_lays_it_out(
    prompts, g, c_lens, max_rows, budget, packed, seed
):
    ids, attn, start = batch(prompts, g, c_lens, seed=seed)
    slices = mb.plan(ids, attn, start, max_rows, budget, packed)
    assert [s.start for s in slices] == [0, *[s.stop for s in slices[:-1]]] and slices[-1].stop == len(ids)
    for s in slices:
        rows = s.stop - s.start
        assert 1 <= rows <= max_rows
        # the cost the plan assumed is the width the real packer makes
        assert rows == 1 or mb.cost(ids[s], attn[s], start, packed) <= budget
    # greedy: a micro-batch stopped only because the next row would not fit (or the row cap)
    for s, nxt in zip(slices, slices[1:]):
        grown = slice(s.start, nxt.start + 1)
        assert s.stop - s.start == max_rows or mb.cost(ids[grown], attn[grown], start, packed) > budget


def test_budget_shrinks_with_an_out_of_memory_back_off():
    from grpoflow.config import validate_params
    from grpoflow.rl.health import HealthMonitor
    from grpoflow.rl.learner import Learner
    from grpoflow.rl.loop_state import LoopState
    from grpoflow.rl.ranks import Ranks
    from grpoflow.rl.step_timing import PhaseTimer

    cfg = validate_params({"rl": {"engine": {"micro_batch_size": 16, "max_tokens_per_micro_batch": 4000}}}).rl
    state = LoopState(backoff={"micro_batch_size": 4})
    learner = Learner(cfg, None, None, Ranks(), state=state, health=HealthMonitor(), timer=PhaseTimer())
    assert (learner.micro_batch_size, learner.token_budget) == (4, 1000)


def test_loss_scales_of_a_mean_over_every_process_tokens_by_hand():
    # A token mean over the step: this process's micro-batches hold 5 and 3 tokens, the other's 8 (16 in all);
    # DeepSpeed divides each loss by 2 accumulation steps and averages 2 processes, so the factors are
    # 5 * 2 * 2 / 16 and 3 * 2 * 2 / 16: each micro-batch's token mean then counts as its tokens' share of 16.
    halves = [slice(0, 2), slice(2, 4)]
    assert mb.loss_scales(halves, 2, sizes=[5.0, 3.0], total=16.0, world=2) == [1.25, 0.75]
    # a mean over rows on 2 processes of 4 rows each: the rows' share of 8, as on one process of 8
    assert mb.loss_scales(halves, 2, total=8.0, world=2) == [1.0, 1.0]


def test_a_token_mean_weighs_micro_batches_by_their_tokens_on_one_process():
    import torch

    from grpoflow.rl.ranks import Ranks

    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # 3 1 2 2 tokens
    assert Ranks().token_scales(mask, [slice(0, 1), slice(1, 4)], 2) == [3 * 2 / 8, 5 * 2 / 8]
    assert Ranks().row_scales([slice(0, 1), slice(1, 4)], 2) == [1 * 2 / 4, 3 * 2 / 4]
    assert Ranks().batch_wide(lambda r: r - r.mean(), torch.tensor([1.0, 3.0])).tolist() == [-1.0, 1.0]
