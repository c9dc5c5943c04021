"""Refreshing the frozen reference toward the policy during training (``rl.ref_sync_every``,
``rl.ref_sync_alpha``): the GRPO spec's remedy for a policy pulled back by a stale anchor."""

from __future__ import annotations

import torch

from grpoflow.config import RLConfig


def reference_refresh_due(cfg: RLConfig, step: int) -> bool:
    """Whether the reference is refreshed after step ``step`` (0-based)."""
    return bool(cfg.ref_sync_every) and (step + 1) % cfg.ref_sync_every == 0


@torch.no_grad()
def refresh_reference(ref: torch.nn.Module, engine, alpha: float) -> None:
    """``ref <- alpha * policy + (1 - alpha) * ref``, weight by weight (TRL's ``sync_ref_model``;
    the spec's remedy "mix the reference policy into training" run the other way: the anchor
    follows the policy slowly). ZeRO-3 shards are gathered for it."""
    from grpoflow.models.engine import import_deepspeed

    policy = engine.module
    gather = import_deepspeed().zero.GatheredParameters(
        list(policy.parameters()), enabled=engine.zero_optimization_stage() == 3
    )
    with gather:
        for r, p in zip(ref.parameters(), policy.parameters(), strict=True):
            r.mul_(1 - alpha).add_(p.detach().to(r.device, r.dtype), alpha=alpha)
