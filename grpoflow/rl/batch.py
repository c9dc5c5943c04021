"""What the RL loop hands around within a step: the scored rollouts (:class:`Scored`) and the batch
as model inputs (:class:`Batch`), which an algorithm's update takes (:mod:`grpoflow.rl.algorithm`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpoflow.rollout import Rollouts, concat_rollouts


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the tokens ``mask`` keeps, for metrics: a 0-dim tensor, without gradient,
    left on the device (the learner reads an update's metrics at once)."""
    return (x.detach() * mask).sum() / mask.sum().clamp(min=1)


@dataclass(kw_only=True)
class Batch:
    """One step's rollouts as model inputs, with their rewards."""

    ids: torch.Tensor  # (N, P + C) prompt and completion tokens
    attn: torch.Tensor  # (N, P + C)
    mask: torch.Tensor  # (N, C) float: completion tokens that count in the loss
    start: int  # P: where completions begin
    rewards: torch.Tensor  # (N,) summed verifier reward
    group_size: int
    sampler_logp: torch.Tensor | None = None  # (N, C) log-probs the rollout engine sampled with, if reported

    @classmethod
    def of(cls, scored: Scored, group_size: int, *, mask_truncated: bool = False) -> Batch:
        """The scored rollouts as model inputs: ``[prompts | completions]``; ``mask_truncated`` leaves
        completions cut at the length cap out of the loss (``rl.mask_truncated_completions``)."""
        ro = scored.rollouts
        mask = ro.completion_mask.float()
        if mask_truncated:
            mask = mask * (~ro.truncated).float().unsqueeze(1)
        return cls(
            ids=torch.cat([ro.prompt_ids, ro.completion_ids], dim=1),
            attn=torch.cat([ro.prompt_mask, ro.completion_mask], dim=1),
            mask=mask,
            start=ro.prompt_ids.shape[1],
            rewards=scored.total,
            group_size=group_size,
            sampler_logp=ro.sampler_logprobs,
        )


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
