"""A Bradley-Terry reward model: one scalar score head on the SFT policy, trained on preference pairs.

The model is ``P(chosen > rejected) = sigmoid(r(x, y_c) - r(x, y_r))`` (Bradley & Terry 1952), fitted
by the loss of the InstructGPT reward model (Ouyang et al. 2022, eq. 1) over pairs of completions of
one prompt. ``r`` is a Hugging Face ``*ForSequenceClassification`` with ``num_labels=1`` whose backbone
starts from the SFT policy's weights; it reads the score at the last token that is not padding.

This module is its training: the loss and the loop. The pairs are :mod:`grpoflow.data.pairs`, the
model (built, loaded, scoring) :mod:`grpoflow.models.reward_model`, its held-out evaluation
:mod:`grpoflow.evaluation.pairwise`, the normalisation of its scores :class:`grpoflow.rl.rewards.RunningNorm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from grpoflow.data.pairs import EncodedPair
from grpoflow.models.reward_model import pair_scores

if TYPE_CHECKING:
    import torch


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """``mean(-log sigmoid(r_c - r_r))``: the negative log-likelihood of the observed preferences
    under Bradley-Terry (InstructGPT RM loss, Ouyang et al. 2022, eq. 1, one pair per comparison).

    ``logsigmoid`` is evaluated stably for any margin: ``-log(1 + exp(-m))`` never overflows, and a
    large negative margin gives a loss of about ``-m`` instead of ``inf``.
    """
    import torch
    import torch.nn.functional as F

    if chosen.shape != rejected.shape:
        raise ValueError(
            f"chosen and rejected scores differ in shape: {tuple(chosen.shape)} vs {tuple(rejected.shape)}"
        )
    dtype = torch.promote_types(chosen.dtype, torch.float32)  # never in bf16/fp16; float64 stays
    return -F.logsigmoid(chosen.to(dtype) - rejected.to(dtype)).mean()


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_reward_model(
    engine: Any,
    train_encoded: Sequence[EncodedPair],
    *,
    epochs: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    on_step: Callable[[int, dict], None] | None = None,
) -> list[float]:
    """Fit the Bradley-Terry loss for ``epochs`` passes in optimizer steps of ``batch_size`` pairs;
    returns each step's loss.

    The engine is :func:`grpoflow.models.engine.build_engine` ``(model, cfg, batch_size)``: its batch and
    micro-batch count *pairs*, and each micro-batch's chosen and rejected sequences go through one
    forward pass (2 x micro sequences). Every process draws the same seeded order and trains on its
    own slice of each step's pairs; the logged loss and accuracy (share of pairs with ``r_c > r_r``,
    before the step) are this process's.
    """
    from grpoflow.models.engine import optimizer_step
    from grpoflow.trainers.sft import batch_indices

    if not train_encoded:
        raise ValueError("no training pairs: every pair was skipped or held out")
    rank, world = _rank_and_world()
    per_rank, micro = batch_size // world, engine.train_micro_batch_size_per_gpu()
    steps = max(1, math.ceil(len(train_encoded) * epochs / batch_size))
    losses = []
    engine.train()
    for step, chosen in enumerate(batch_indices(len(train_encoded), batch_size, steps, seed)):
        mine = [train_encoded[i] for i in chosen[rank * per_rank : (rank + 1) * per_rank]]
        step_loss, wins = 0.0, 0
        for lo in range(0, per_rank, micro):
            batch = mine[lo : lo + micro]
            r_c, r_r = pair_scores(engine, batch, pad_id)
            loss = bradley_terry_loss(r_c, r_r)
            engine.backward(loss)
            optimizer_step(engine)
            step_loss += loss.item() * len(batch) / per_rank
            wins += int((r_c > r_r).sum())
        losses.append(step_loss)
        if on_step:
            stats = {"loss": step_loss, "accuracy": wins / per_rank, "lr": engine.get_lr()[0], "steps": steps}
            on_step(step, stats)
    return losses
