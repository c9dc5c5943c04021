"""The policy loss every algorithm calls: PPO's clipped surrogate (Schulman et al. 2017, eq. 7), with
GRPO's options: a KL penalty in the loss, a sequence-level ratio, token aggregations.

Per token (DeepSeekMath, Shao et al. 2024, eq. 3):

    ratio   = exp(logp - old_logp)
    surr    = min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
    k3      = exp(ref_logp - logp) - (ref_logp - logp) - 1      (Schulman's unbiased KL estimator)
    loss_t  = -surr + beta * k3

k1 (``logp - ref_logp``) and k2 (``(logp - ref_logp)^2 / 2``) are the other two estimators of
Schulman's "Approximating KL Divergence"; ``grpo.kl_placement: reward`` folds the penalty into the
reward instead (see :mod:`grpoflow.algorithms.grpo.update`).

``eps_high > eps_low`` is DAPO's "clip-higher" (Yu et al. 2025). Aggregation over tokens
(:data:`AGGREGATIONS`): ``grpo`` (mean over each sequence, then over sequences; DeepSeekMath), ``bnpo``
(mean over all unmasked tokens in the batch; DAPO's token-level loss) and ``dr_grpo`` (sum over tokens
divided by N x T, a constant; Liu et al. 2025). GRPO and PPO both call :func:`clipped_surrogate_loss`:
PPO with per-token GAE advantages and its KL penalty in the reward (no ``ref_logp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from grpoflow import metric_names as M
from grpoflow.config.rl import AGGREGATIONS as AGGREGATION_NAMES
from grpoflow.config.rl import KL_ESTIMATOR_NAMES, Aggregation, KLEstimator
from grpoflow.registry import Registry

RatioLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class Aggregator:
    """A token aggregation of the policy loss: ``(per-token loss, 0/1 mask) -> the scalar loss``, and
    what its mean is over, which decides how the step's micro-batches are weighed
    (:mod:`grpoflow.rl.micro_batches`): the step's loss tokens (``token_mean``), else its rows."""

    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    token_mean: bool = False

    def __call__(self, per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.reduce(per_token, mask)


# Each under its name of grpoflow.config.rl.Aggregation.
AGGREGATIONS: Registry[Aggregator] = Registry("aggregation", AGGREGATION_NAMES, "grpoflow.config.rl.Aggregation")
# (log-probs, reference log-probs) -> per-token KL(policy || reference); names of grpoflow.config.rl.KLEstimator.
KL_ESTIMATORS: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry(
    "KL estimator", KL_ESTIMATOR_NAMES, "grpoflow.config.rl.KLEstimator"
)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def _check_inputs(logp, old_logp, ref_logp, advantages, mask, beta, ratio_level, aggregation, clip_eps, kl_estimator):
    """Shapes and values the loss can use; a ValueError naming the argument otherwise."""
    shape = tuple(logp.shape)
    if logp.dim() != 2:
        raise ValueError(f"logp must be (N, T), got shape {shape}")
    for name, t in (("old_logp", old_logp), ("mask", mask)):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have logp's shape {shape}, got {tuple(t.shape)}")
    if ref_logp is not None and tuple(ref_logp.shape) != shape:
        raise ValueError(f"ref_logp must have logp's shape {shape}, got {tuple(ref_logp.shape)}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if tuple(advantages.shape) not in ((shape[0],), shape):
        raise ValueError(
            f"advantages must be ({shape[0]},), one per sequence, or {shape} per token, got {tuple(advantages.shape)}"
        )
    if ratio_level not in ("token", "sequence"):
        raise ValueError(f"ratio_level must be 'token' or 'sequence', got {ratio_level!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")
    if not clip_eps > 0:
        raise ValueError(f"clip_eps must be > 0, got {clip_eps}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {sorted(KL_ESTIMATORS)}, got {kl_estimator!r}")


def sequence_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over each completion's tokens, then over completions (DeepSeekMath, eq. 3)."""
    return _masked_mean(per_token, mask, dim=1).mean()


def token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over every kept token of the batch (DAPO's token-level loss, eq. 12)."""
    return _masked_mean(per_token, mask)


def constant_normalised_sum(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The sum over kept tokens divided by N x T, a constant (Dr. GRPO, Liu et al. 2025)."""
    return (per_token * mask).sum() / per_token.numel()


AGGREGATIONS.register("grpo")(Aggregator(sequence_mean))
AGGREGATIONS.register("bnpo")(Aggregator(token_mean, token_mean=True))
AGGREGATIONS.register("dr_grpo")(Aggregator(constant_normalised_sum))


@KL_ESTIMATORS.register("k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token ``KL(pi || pi_ref)`` estimate ``exp(ref - logp) - (ref - logp) - 1`` (always >= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


@KL_ESTIMATORS.register("k1")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token ``logp - ref``: unbiased for ``KL(pi || pi_ref)`` on samples of pi, high variance, may be < 0."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token ``(logp - ref)^2 / 2``: biased, low variance, always >= 0."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_penalised_rewards(
    rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    estimator: KLEstimator = "k3",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The KL penalty folded into the reward (InstructGPT, Ouyang et al. 2022, eq. 2; verl's
    ``use_kl_in_reward``): ``r_i - beta * sum_t KL_t`` over completion ``i``'s tokens, with ``logp``
    the sampling policy's log-probs. Returns the new rewards ``(N,)`` and the per-token KL ``(N, T)``."""
    keep = mask.bool()
    kl = torch.where(keep, KL_ESTIMATORS[estimator](logp.detach(), ref_logp.detach()), torch.zeros_like(logp))
    return rewards - beta * kl.sum(dim=1).to(rewards.dtype), kl


CorrectionMode = Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def rollout_correction(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, mode: CorrectionMode, cap: float
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, torch.Tensor]]:
    """Importance correction of off-policy rollouts: ``(weights or None, mask, metrics)``, the metrics
    0-dim tensors.

    ``rho = exp(trainer_logp - sampler_logp)`` per token, or its product over each sequence for the
    ``sequence_*`` modes. ``*_truncate`` (TIS) weights the loss by ``min(rho, cap)``; ``*_mask`` (MIS)
    zeroes the mask where ``rho`` is outside ``[1/cap, cap]``. Metrics, whatever the mode: the mean
    absolute log-prob difference and the largest token ratio, over the tokens ``mask`` keeps.
    """
    keep = mask.bool()
    log_rho = torch.where(keep, trainer_logp.detach() - sampler_logp.detach(), torch.zeros_like(trainer_logp))
    m = keep.to(trainer_logp.dtype)
    if log_rho.numel():
        largest = torch.where(keep, log_rho, torch.full_like(log_rho, -torch.inf)).max().exp()
    else:  # no completion tokens at all: nothing is off-policy
        largest = torch.ones((), dtype=log_rho.dtype, device=log_rho.device)
    metrics = {  # 0-dim tensors, left on the device (the caller reads them with its others)
        M.ROLLOUT_LOGP_DIFF: _masked_mean(log_rho.abs(), m),
        M.ROLLOUT_RATIO_MAX: torch.where(keep.any(), largest, torch.ones_like(largest)),
    }
    if mode == "none":
        return None, mask, metrics
    if mode.startswith("sequence"):
        log_rho = log_rho.sum(dim=1, keepdim=True).expand_as(log_rho)
    if mode.endswith("truncate"):
        return torch.exp(log_rho).clamp(max=cap), mask, metrics
    inside = (log_rho.abs() <= math.log(cap)).to(mask.dtype)
    metrics[M.ROLLOUT_MASKED_FRAC] = 1.0 - _masked_mean(inside.to(m.dtype), m).double()  # as 1.0 - float(...)
    return None, mask * inside, metrics


def _ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, keep: torch.Tensor, ratio_level: RatioLevel
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs with the padding zeroed, importance ratio)``: per token, or per sequence
    (``exp`` of the masked mean log-ratio, broadcast over the sequence)."""
    # Zero the padding first: it may hold inf/NaN log-probs, and inf * 0 is NaN (in the
    # forward pass and in torch.where's backward alike).
    zeros = torch.zeros_like(logp)
    lp = torch.where(keep, logp, zeros)
    log_ratio = lp - torch.where(keep, old_logp.detach(), zeros)
    if ratio_level == "sequence":
        log_ratio = _masked_mean(log_ratio, keep.to(logp.dtype), dim=1).unsqueeze(1).expand_as(logp)
    return lp, torch.exp(log_ratio)


def _token_advantages(advantages: torch.Tensor, keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Advantages that broadcast over ``(N, T)``: one per completion as a column, or per token with
    the padding zeroed."""
    adv = advantages.detach().to(dtype)
    return adv.unsqueeze(1) if adv.dim() == 1 else torch.where(keep, adv, torch.zeros_like(adv))


def _clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    low: float,
    high: float,
    token_weights: torch.Tensor | None,
    keep: torch.Tensor,
) -> torch.Tensor:
    """Per token, the clipped surrogate to minimise, ``-min(r A, clip(r, low, high) A)``, times the
    token weights (TIS) where given."""
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, low, high) * adv)
    if token_weights is not None:
        per_token = per_token * torch.where(keep, token_weights.detach().to(ratio.dtype), torch.zeros_like(ratio))
    return per_token


def _kept_entropy(entropy: torch.Tensor | None, logp: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The per-token entropies of an entropy bonus, the padding zeroed."""
    if entropy is None or tuple(entropy.shape) != tuple(logp.shape):
        raise ValueError(f"an entropy bonus needs entropy of logp's shape {tuple(logp.shape)}")
    return torch.where(keep, entropy, torch.zeros_like(logp))


def clipped_surrogate_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ratio_level: RatioLevel = "token",
    aggregation: Aggregation = "grpo",
    kl_estimator: KLEstimator = "k3",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped-surrogate policy loss to minimise (GRPO's and PPO's), and diagnostics.

    Args:
        logp: ``(N, T)`` per-token log-probs of the completions under the policy being trained.
        old_logp: same, under the policy that sampled them (no gradient flows through it).
        advantages: ``(N,)``, one per completion, broadcast over its tokens (GRPO); or ``(N, T)``
            per token (PPO with GAE).
        mask: ``(N, T)`` 0/1, 1 on completion tokens that count.
        ref_logp: same as ``logp``, under the frozen reference; the KL term is added, weighted by
            ``beta``, exactly when it is given (a run without a reference has no KL term).
        beta: weight of the KL penalty.
        clip_eps, clip_eps_high: the clip range is ``[1 - clip_eps, 1 + (clip_eps_high or clip_eps)]``.
        ratio_level: ``"token"`` (one ratio per token) or ``"sequence"`` (``exp`` of the masked mean
            of the token log-ratio, broadcast over the sequence; GSPO-style length-normalised).
        aggregation: a name of :data:`AGGREGATIONS` (see the module docstring).
        kl_estimator: ``"k1"``, ``"k2"`` or ``"k3"`` (:data:`KL_ESTIMATORS`) for the KL term.
        entropy, entropy_coef: per-token entropies (with gradient) and the weight of the bonus
            ``-entropy_coef * entropy`` added per token (none when the weight is 0).
        token_weights: ``(N, T)`` importance weights of the surrogate term (TIS, :func:`rollout_correction`).
    Returns:
        ``(loss, metrics)`` with metrics ``kl`` (with a reference), ``clip_ratio``, ``ratio_mean``: 0-dim
        tensors, not read from the device here (one read per metric would stall a GPU each time).
    """
    _check_inputs(logp, old_logp, ref_logp, advantages, mask, beta, ratio_level, aggregation, clip_eps, kl_estimator)
    keep = mask.bool()
    m = keep.to(logp.dtype)
    zeros = torch.zeros_like(logp)
    lp, ratio = _ratio(logp, old_logp, keep, ratio_level)
    adv = _token_advantages(advantages, keep, logp.dtype)
    low, high = 1.0 - clip_eps, 1.0 + (clip_eps if clip_eps_high is None else clip_eps_high)
    per_token = _clipped_surrogate(ratio, adv, low, high, token_weights, keep)
    metrics: dict[str, torch.Tensor] = {}  # 0-dim tensors, left on the device (the learner reads them at once)
    if ref_logp is not None:
        kl = KL_ESTIMATORS[kl_estimator](lp, torch.where(keep, ref_logp.detach(), zeros))
        per_token = per_token + beta * kl
        metrics[M.KL] = _masked_mean(kl.detach(), m)
    if entropy_coef:
        per_token = per_token - entropy_coef * _kept_entropy(entropy, logp, keep)
    loss = AGGREGATIONS[aggregation](per_token, m)
    clipped = ((ratio < low) & (adv < 0)) | ((ratio > high) & (adv > 0))
    metrics[M.CLIP_RATIO] = _masked_mean(clipped.to(logp.dtype), m)
    metrics["ratio_mean"] = _masked_mean(ratio.detach(), m)
    return loss, metrics
