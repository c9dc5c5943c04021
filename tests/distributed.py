"""A spawned test process as one rank of a gloo group on this machine."""

from __future__ import annotations

import os

import torch


def become_rank(rank: int, world: int, port: int) -> None:
    """Set the variables a launcher would (torch.distributed reads them when the group starts) for
    rank ``rank`` of ``world`` meeting at 127.0.0.1:``port``, with one thread: the ranks share a
    2-core machine."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
