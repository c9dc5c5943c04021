"""Advantage estimators: GRPO's group-relative advantage, its critic-free relatives, and PPO's GAE.

For the G completions ``r_1..r_G`` of one prompt (outcome rewards, one per completion):

- ``grpo`` (Shao et al. 2024, "DeepSeekMath", eq. 3 and section 4.1.2): ``(r_i - mean(r)) / std(r)``.
- ``dr_grpo`` (Liu et al. 2025, "Understanding R1-Zero-Like Training"): ``r_i - mean(r)``; no
  division by the std, which favours questions of little reward variance.
- ``rloo`` (Ahmadian et al. 2024, "Back to Basics", eq. 5): ``r_i - mean_{j != i}(r_j)``, the
  leave-one-out baseline; equal to ``G / (G - 1) * (r_i - mean(r))``.
- ``reinforce_pp`` (Hu 2025, "REINFORCE++"): ``(r_i - mean(B)) / std(B)`` over the whole batch
  ``B`` of the step (every process's: :meth:`grpoflow.rl.ranks.Ranks.batch_wide`), no per-prompt baseline.

GAE (Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", eq. 16) is the critic-based estimator that the PPO baseline uses, with the lambda of
the policy's advantages and that of the critic's targets set apart as VAPO's decoupled GAE does
(Yue et al. 2025, "VAPO", arXiv 2504.05118).

Both kinds are registered by name (:data:`ESTIMATORS`, :data:`CRITIC_ESTIMATOR_FNS`, each a
:class:`grpoflow.registry.Registry`), each with typed
options of its own (:data:`grpoflow.algorithms.grpo.config.ADVANTAGE_ESTIMATORS`,
:data:`grpoflow.algorithms.ppo.config.CRITIC_ESTIMATORS`), read from the flat keys of its section.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from grpoflow.algorithms.grpo.config import ADVANTAGE_ESTIMATORS, BatchNormOptions, GroupNormOptions, NoAdvantageOptions
from grpoflow.algorithms.ppo.config import CRITIC_ESTIMATORS, GaeOptions
from grpoflow.registry import Registry

# No module-level torch: callers that only build runs need not pay for torch's import. Tensor
# methods do all the work. The params schema checks names against ADVANTAGE_ESTIMATORS.
if TYPE_CHECKING:
    import torch

    from grpoflow.algorithms.grpo.config import GRPOConfig

Scale = Literal["group", "batch", "none"]
Estimator = Callable[["torch.Tensor", int, "GRPOConfig"], "torch.Tensor"]
TypedEstimator = Callable[["torch.Tensor", int, Any], "torch.Tensor"]  # (rewards, G, its own options)
ESTIMATORS: Registry[Estimator] = Registry(
    "advantage estimator", ADVANTAGE_ESTIMATORS, "grpoflow.algorithms.grpo.config.ADVANTAGE_ESTIMATORS"
)


def estimator(name: str) -> Callable[[TypedEstimator], TypedEstimator]:
    """Register an advantage estimator under ``name`` (the value of ``grpo.advantage_estimator``).

    The function takes ``(rewards, group_size, options)``, its options typed as
    :data:`~grpoflow.algorithms.grpo.config.ADVANTAGE_ESTIMATORS` says; ``ESTIMATORS[name]`` takes the
    ``grpo`` section (or those options) and hands the function only its own options."""

    def from_section(fn: TypedEstimator) -> Estimator:
        options = ADVANTAGE_ESTIMATORS[name]

        @functools.wraps(fn)
        def adapted(rewards: torch.Tensor, group_size: int, cfg: Any) -> torch.Tensor:
            return fn(rewards, group_size, cfg if isinstance(cfg, options) else cfg.estimator_options(name))

        return adapted

    return ESTIMATORS.register(name, from_section)


def _check_rewards(rewards: torch.Tensor, group_size: int) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one reward per completion), got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group of one has no relative signal), got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(
            f"len(rewards)={rewards.numel()} is not divisible by group_size={group_size}: "
            "rewards must be ordered group by group, G completions per prompt"
        )
    if not rewards.isfinite().all():
        bad = (~rewards.isfinite()).nonzero().flatten().tolist()
        raise ValueError(f"rewards contain non-finite values at positions {bad[:10]}")


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    scale: Scale = "group",
    ddof: int = 0,
    eps: float = 1e-4,
) -> torch.Tensor:
    """Group-relative advantages, one per completion.

    Args:
        rewards: 1-D tensor ordered group by group (G completions of prompt 0, then prompt 1, ...).
        group_size: G, the completions per prompt.
        scale: ``"group"`` divides by each group's std (DeepSeekMath); ``"batch"`` divides by
            the std of all rewards in the batch (the mean is still per group); ``"none"`` only
            subtracts the group mean (Dr. GRPO, Liu et al. 2025).
        ddof: 0 for the population std (the spec's formula), 1 for Bessel's correction
            (TRL, verl).
        eps: added to the std so that a group of identical rewards gets advantage 0.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    _check_rewards(rewards, group_size)
    r = rewards.double().view(-1, group_size)
    centered = r - r.mean(dim=1, keepdim=True)
    if scale == "group":
        centered = centered / (r.std(dim=1, correction=ddof, keepdim=True) + eps)
    elif scale == "batch":
        centered = centered / (r.flatten().std(correction=ddof) + eps)
    return _like_rewards(centered.flatten(), rewards)


def _like_rewards(advantages: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """``advantages`` (computed in float64) in the rewards' float type, float32 for integer rewards."""
    return advantages.to(rewards.dtype) if rewards.is_floating_point() else advantages.float()


@estimator("grpo")
def grpo_estimator(rewards: torch.Tensor, group_size: int, options: GroupNormOptions) -> torch.Tensor:
    """GRPO's group-relative advantage, scaled as ``grpo.advantage_scale`` says."""
    return group_advantages(rewards, group_size, scale=options.scale, ddof=options.ddof, eps=options.eps)


@estimator("dr_grpo")
def dr_grpo_estimator(rewards: torch.Tensor, group_size: int, options: NoAdvantageOptions) -> torch.Tensor:
    """Dr. GRPO's advantage: the group mean subtracted, no std (no options: ``grpo.advantage_*`` unused)."""
    return group_advantages(rewards, group_size, scale="none")


@estimator("rloo")
def rloo_estimator(rewards: torch.Tensor, group_size: int, options: NoAdvantageOptions) -> torch.Tensor:
    """RLOO's advantage: each reward minus the mean of the other G - 1 rewards of its group (no options)."""
    _check_rewards(rewards, group_size)
    r = rewards.double().view(-1, group_size)
    others = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return _like_rewards((r - others).flatten(), rewards)


@estimator("reinforce_pp")
def reinforce_pp_estimator(rewards: torch.Tensor, group_size: int, options: BatchNormOptions) -> torch.Tensor:
    """REINFORCE++'s advantage: rewards normalised over the batch (``grpo.advantage_ddof``,
    ``grpo.advantage_eps``), no per-group baseline."""
    _check_rewards(rewards, group_size)
    r = rewards.double()
    return _like_rewards((r - r.mean()) / (r.std(correction=options.ddof) + options.eps), rewards)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    lam_critic: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over completion tokens, its lambda decoupled as in VAPO.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t+1}``,
    where ``V`` and ``A`` beyond the last unmasked token are 0 (the episode ends there).

    Args:
        rewards, values, mask: ``(N, T)`` token-level rewards, critic values, 0/1 mask.
        lam: the lambda of the advantages (the policy's).
        lam_critic: the lambda of the returns (the critic's targets); None: ``lam``. At 1.0 the
            returns are the Monte Carlo returns, whatever the values (VAPO's decoupled GAE).
    Returns:
        ``(advantages, returns)``, both ``(N, T)``, zero where ``mask`` is 0;
        ``returns = A'_t + values`` are the critic's regression targets, ``A'`` the advantages
        under ``lam_critic`` (the same as ``advantages`` when it is None or equal to ``lam``).
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"rewards, values and mask must share one (N, T) shape, got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    lams = (lam,) if lam_critic is None or lam_critic == lam else (lam, lam_critic)
    m = mask.to(values.dtype)
    out = [values.new_zeros(values.shape) for _ in lams]
    next_value = values.new_zeros(values[:, 0].shape)
    next_adv = [values.new_zeros(values[:, 0].shape) for _ in lams]
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        for i, lam_i in enumerate(lams):
            adv_t = (delta + gamma * lam_i * next_adv[i]) * m[:, t]
            out[i][:, t] = adv_t
            next_adv[i] = adv_t
        # A masked position ends the episode for the tokens before it.
        next_value = values[:, t] * m[:, t]
    returns = (out[-1] + values) * m
    return out[0], returns


# Critic-based estimators by name: (rewards, values, mask, the ppo section or the estimator's options)
# -> (advantages, returns), each handed only its own typed options (CRITIC_ESTIMATORS).
CriticEstimator = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor", Any], "tuple[torch.Tensor, torch.Tensor]"]
CRITIC_ESTIMATOR_FNS: Registry[CriticEstimator] = Registry(
    "critic estimator", CRITIC_ESTIMATORS, "grpoflow.algorithms.ppo.config.CRITIC_ESTIMATORS"
)


@CRITIC_ESTIMATOR_FNS.register("gae")
def _gae_estimator(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, cfg: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gae` with the ``ppo`` section's (or its own) :class:`~grpoflow.algorithms.ppo.config.GaeOptions`."""
    options = cfg if isinstance(cfg, GaeOptions) else cfg.estimator_options("gae")
    return gae(rewards, values, mask, gamma=options.gamma, lam=options.actor_lam, lam_critic=options.critic_lam)


def masked_whiten(
    x: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 1e-8,
    total: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Normalise ``x`` to zero mean and unit variance over the unmasked entries; ``total`` sums each
    statistic's parts over the processes that hold the rest of the batch (none: ``x`` is all of it)."""
    total = total or (lambda t: t)
    m = mask.to(x.dtype)
    n = total(m.sum()).clamp(min=1)
    mean = total((x * m).sum()) / n
    var = total((((x - mean) * m) ** 2).sum()) / n
    return (x - mean) * (var + eps).rsqrt() * m
