"""What explained variance a PPO critic can reach on a task: the yardstick for ``learning/explained_variance``.

A critic's explained variance (1 - Var(R - V) / Var(R) over the completion tokens) is bounded by what
the returns depend on that the critic can see and compute. Two references, on rollouts of one fixed
policy with Monte Carlo returns (gamma = lambda = 1, no KL: every token's return is its completion's
reward):

- **a prompt-only oracle**: each token valued at its group's mean reward, in-sample (an upper bound
  for any critic that does not read the completion, flattered by seeing the token's own reward)
  and leave-one-out (the other G - 1 samples' mean: an honest estimate of the prompt's value);
- **a converged critic**: the PPO critic's own architecture and initialisation
  (:class:`grpoflow.algorithms.ppo.critic.ValueModel`), fitted offline for several epochs on many more rollouts
  than a training run gives it, scored on held-out prompts' rollouts.

An online critic near the converged one's held-out score is as good as a critic of its size gets on
the task; far below it, it is under-trained (learning rate, warm-up, epochs).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from grpoflow.algorithms.ppo.critic import ValueModel, completion_values, explained_variance
from grpoflow.rollout import Rollouts


@dataclass
class RewardedBatch:
    """One batch of rollouts (group by group, ``g`` samples per prompt) and their rewards."""

    rollouts: Rollouts
    rewards: torch.Tensor  # (N,)
    g: int

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor]:
        """``(ids, attention, completion start, completion mask, Monte Carlo returns)``."""
        r = self.rollouts
        mask = r.completion_mask.float()
        returns = self.rewards.float()[:, None] * mask
        ids, attn = torch.cat([r.prompt_ids, r.completion_ids], 1), torch.cat([r.prompt_mask, r.completion_mask], 1)
        return ids, attn, r.prompt_ids.shape[1], mask, returns


def _pooled_ev(parts: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    """:func:`explained_variance` over ``(values, returns, mask)`` parts of different widths."""
    width = max(p[0].shape[1] for p in parts)
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]))  # noqa: E731
    values, returns, mask = (torch.cat([pad(p[i]) for p in parts]) for i in range(3))
    return explained_variance(values, returns, mask)


def prompt_oracle_ev(batches: Sequence[RewardedBatch]) -> dict[str, float]:
    """Explained variance of valuing every token at its group's mean reward: ``in_sample`` (the
    token's own sample included) and ``leave_one_out`` (the other samples' mean; needs G >= 2)."""
    in_sample, loo = [], []
    for b in batches:
        _, _, _, mask, returns = b.tensors()
        groups = b.rewards.float().view(-1, b.g)
        mean = groups.mean(1, keepdim=True).expand_as(groups).reshape(-1, 1)
        others = ((groups.sum(1, keepdim=True) - groups) / max(b.g - 1, 1)).reshape(-1, 1)
        in_sample.append((mean * mask, returns, mask))
        loo.append((others * mask, returns, mask))
    return {"in_sample": _pooled_ev(in_sample), "leave_one_out": _pooled_ev(loo)}


@torch.no_grad()
def critic_ev(critic: ValueModel, batches: Sequence[RewardedBatch], positions: Sequence[int] = ()) -> dict[str, float]:
    """The critic's explained variance over ``batches`` (``ev``), and at each completion position of
    ``positions`` alone (``ev@t``: how well it judges a completion t tokens in)."""
    was_training = critic.training
    critic.eval()
    parts = []
    for b in batches:
        ids, attn, start, mask, returns = b.tensors()
        parts.append((completion_values(critic, ids, attn, start) * mask, returns, mask))
    critic.train(was_training)
    out = {"ev": _pooled_ev(parts)}
    for t in positions:
        at = [(v, r, m * (torch.arange(m.shape[1], device=m.device) == t)) for v, r, m in parts]
        out[f"ev@{t}"] = _pooled_ev(at)
    return out


def fit_critic(
    critic: ValueModel,
    train: Sequence[RewardedBatch],
    held_out: Sequence[RewardedBatch],
    *,
    epochs: int,
    lr: float,
    micro_batch: int = 64,
    seed: int = 0,
    positions: Sequence[int] = (0, 4, 8, 12),
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``critic`` to the Monte Carlo returns of ``train`` (mean squared error over completion tokens,
    AdamW, gradient norm clipped at 1), ``epochs`` shuffled passes; the held-out scores after each
    (:func:`critic_ev` at ``positions``)."""
    opt = torch.optim.AdamW(critic.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    history = []
    critic.train()
    for epoch in range(epochs):
        order = list(range(len(train)))
        random.Random(seed + epoch).shuffle(order)
        for i in order:
            ids, attn, start, mask, returns = train[i].tensors()
            for lo in range(0, len(ids), micro_batch):
                sl = slice(lo, lo + micro_batch)
                values = completion_values(critic, ids[sl], attn[sl], start)
                loss = (0.5 * (values - returns[sl]) ** 2 * mask[sl]).sum() / mask[sl].sum().clamp(min=1)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
                opt.step()
        history.append(critic_ev(critic, held_out, positions))
        if on_epoch is not None:
            on_epoch(epoch, history[-1])
    return history
