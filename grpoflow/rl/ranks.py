"""The step's statistics over every process of the data-parallel group.

Each process holds whole groups of the step's prompts (:mod:`grpoflow.rl.trainer` shards them), so
a group's statistics need no communication. What spans groups does: a batch-level normalisation of
the advantages (REINFORCE++, grpo's batch scale, PPO's whitening) and the denominators of the loss's
means (the step's rows, or its loss tokens for a token-level mean). :class:`Ranks` makes each the
whole step's, so that one step gives the same update on 1 process and on W
(tests/unit/test_world_size_equivalence.py). With one process each is the local computation, bit
for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from grpoflow.rl import micro_batches


@dataclass(frozen=True)
class Ranks:
    """This process's place in the group: ``rank`` of ``world``, collectives on ``device``."""

    rank: int = 0
    world: int = 1
    device: Any = "cpu"  # NCCL reduces only accelerator tensors

    def summed(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over every process (every process must call this together)."""
        if self.world == 1:
            return t
        out = t.detach().to(self.device, copy=True)
        dist.all_reduce(out)
        return out.to(t.device)

    def anyone(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (every process must call this together)."""
        if self.world == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def gathered(self, rows: torch.Tensor) -> torch.Tensor:
        """The step's ``rows`` of every process (whole groups), in rank order."""
        if self.world == 1:
            return rows
        local = rows.detach().to(self.device).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(parts, local)  # every process holds as many rows (prompts_per_step / world groups)
        return torch.cat(parts).to(rows.device)

    def batch_wide(self, fn: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        """``fn`` of the step's rows of every process, and this process's rows of the result: a
        statistic over the batch is the whole step's."""
        if self.world == 1:
            return fn(rows)
        return fn(self.gathered(rows))[self.rank * len(rows) : (self.rank + 1) * len(rows)]

    def masked_mean(self, x: torch.Tensor, mask: torch.Tensor) -> float:
        """The mean of ``x`` over the tokens ``mask`` keeps on every process, as a float for metrics."""
        return float(self.summed((x.detach() * mask).sum()) / self.summed(mask.sum()).clamp(min=1))

    def row_scales(self, slices: list[slice], gas: int) -> list[float]:
        """:func:`~grpoflow.rl.micro_batches.loss_scales` of losses that are means over their rows."""
        if self.world == 1:
            return micro_batches.loss_scales(slices, gas)
        rows = sum(s.stop - s.start for s in slices)
        total = float(self.summed(torch.tensor(float(rows), dtype=torch.float64)))
        return micro_batches.loss_scales(slices, gas, total=total, world=self.world)

    def token_scales(self, mask: torch.Tensor, slices: list[slice], gas: int) -> list[float]:
        """:func:`~grpoflow.rl.micro_batches.loss_scales` of losses that are means over the tokens
        ``mask`` keeps: the step's token mean over every process (DAPO's token-level loss), however
        its tokens fall into micro-batches and processes."""
        # One read of the device for every micro-batch's token count (a read each would stall a GPU each time).
        sizes = [float(n) for n in torch.stack([mask[sl].sum() for sl in slices]).tolist()]
        total = float(self.summed(torch.tensor(sum(sizes), dtype=torch.float64)))
        return micro_batches.loss_scales(slices, gas, sizes=sizes, total=max(total, 1.0), world=self.world)
