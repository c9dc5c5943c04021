"""What the RL loop hands around within a step: the scored rollouts (:class:`Scored`), the batch as
model inputs (:class:`Batch`) and one micro-batch of the update as an algorithm's loss sees it
(:class:`MicroBatch`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpoflow.rollout import Rollouts, concat_rollouts


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``x`` over the tokens ``mask`` keeps, as a float for metrics."""
    return float((x.detach() * mask).sum() / mask.sum().clamp(min=1))


@dataclass
class Batch:
    """One step's rollouts as model inputs, with their rewards."""

    ids: torch.Tensor  # (N, P + C) prompt and completion tokens
    attn: torch.Tensor  # (N, P + C)
    mask: torch.Tensor  # (N, C) float: completion tokens that count in the loss
    start: int  # P: where completions begin
    rewards: torch.Tensor  # (N,) summed verifier reward
    group_size: int
    sampler_logp: torch.Tensor | None = None  # (N, C) log-probs the rollout engine sampled with, if reported


@dataclass
class MicroBatch:
    """One micro-batch of the update, as the algorithm's loss sees it (:meth:`PolicyTrainer._micro_batch`)."""

    sl: slice  # its rows of the batch
    logp: torch.Tensor  # (n, C) policy log-probs, with gradient
    entropy: torch.Tensor  # (n, C)
    old: torch.Tensor  # (n, C) log-probs of the policy that sampled them
    mask: torch.Tensor  # (n, C) the loss mask after rollout correction
    weights: torch.Tensor | None  # (n, C) token weights of rollout correction, if any
    scale: float = 1.0  # factor of its loss before backward (grpoflow.rl.micro_batches.loss_scales)
    token_scale: float = 1.0  # the same for a mean over its loss tokens (bnpo, PPO's value loss)


@dataclass
class Scored:
    """Rollouts, each completion's task row, and their rewards: the total and each component."""

    rollouts: Rollouts
    rows: list[dict]
    total: torch.Tensor
    parts: dict[str, torch.Tensor]

    def group(self, i: int, g: int) -> Scored:
        """Group ``i`` (its G completions)."""
        idx = list(range(i * g, (i + 1) * g))
        return Scored(
            self.rollouts.select(idx),
            self.rows[i * g : (i + 1) * g],
            self.total[i * g : (i + 1) * g],
            {k: v[i * g : (i + 1) * g] for k, v in self.parts.items()},
        )

    @staticmethod
    def join(groups: list[Scored], pad_id: int) -> Scored:
        """Groups as one batch, in order."""
        return Scored(
            concat_rollouts([s.rollouts for s in groups], pad_id),
            [r for s in groups for r in s.rows],
            torch.cat([s.total for s in groups]),
            {k: torch.cat([s.parts[k] for s in groups]) for k in groups[0].parts},
        )
