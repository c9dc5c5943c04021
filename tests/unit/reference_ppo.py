"""A reference PPO step in plain torch, written top to bottom from the papers, as an oracle for the trainer.

One step on a batch of rollouts, as cleanrl's ``ppo.py`` update reads, with a critic of its own:

    kl_t    = exp(ref_t - old_t) - (ref_t - old_t) - 1          k3 estimate of KL(pi_old || pi_ref), Schulman 2020
    r_t     = -beta kl_t, + R on the completion's last token    InstructGPT's reward (Ouyang et al. 2022, eq. 2)
    delta_t = r_t + gamma V(s_t+1) - V(s_t),  V = 0 past the last token
    A_t     = sum_l (gamma lam_actor)^l delta_t+l               GAE (Schulman et al. 2016, eq. 16)
    R_t     = A'_t + V(s_t),  A' as A under lam_critic          the critic's targets (decoupled GAE, VAPO)
    L_pi    = -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A)   clipped surrogate (Schulman et al. 2017, eq. 7)
    L_V     = 0.5 max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)   value loss of PPO2 (baselines, cleanrl)

The policy and the critic take AdamW steps on their own losses, the global gradient norm clipped
first: ``iterations`` (mu) of the policy's, ``iterations x critic_epochs`` of the critic's; a warm-up
step takes the critic's alone. Within a step neither loss reads the other network (the targets are
fixed before the first update), so the order of their steps cannot change the result. Nothing of
grpoflow is imported: a wrong formula there fails the comparison (tests/unit/test_reference_ppo.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Options:
    """Every setting that changes the step's arithmetic."""

    gamma: float = 1.0
    lam_actor: float = 0.95
    lam_critic: float = 0.95
    kl_coef: float = 0.0  # beta; 0: no reference
    clip_low: float = 0.2
    clip_high: float = 0.2
    value_clip: float = 0.2
    whiten: bool = True  # advantages to zero mean and unit (population) variance over the batch's tokens
    aggregation: str = "grpo"  # grpo: per completion, then over them; bnpo: over all tokens; dr_grpo: / (N x C)
    entropy_coef: float = 0.0
    iterations: int = 1
    critic_epochs: int = 1
    policy_max_norm: float = 1.0  # 0: no clipping
    critic_max_norm: float = 1.0
    mask_truncated: bool = False  # completions cut at the length cap leave every loss
    correction: str = "none"  # {token,sequence}_{truncate,mask}: TIS or MIS of the sampler's mismatch
    correction_cap: float = 2.0


class Critic(torch.nn.Module):
    """V(s_t): a transformer trunk and a linear head at every position."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.trunk, self.head = trunk, torch.nn.Linear(hidden_size, 1)

    def forward(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        """``(N, T)`` values."""
        out = self.trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        return self.head(out.last_hidden_state).squeeze(-1)


def at_completion(model, ro) -> torch.Tensor:
    """The model's outputs (logits, or a critic's values) at the positions that predict each completion
    token: one forward over [left-padded prompt | right-padded completion], ``(N, C, ...)``."""
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], 1)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift the positions
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions)
    out = out if isinstance(out, torch.Tensor) else out.logits
    return out[:, ro.prompt_ids.shape[1] - 1 : -1].float()  # the output at t predicts token t + 1


def policy_outputs(policy, ro) -> tuple[torch.Tensor, torch.Tensor]:
    """``log pi(o_t | q, o_<t)`` and pi's entropy at t, both ``(N, C)``."""
    logp_all = torch.log_softmax(at_completion(policy, ro), -1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, ro.completion_ids.unsqueeze(-1)).squeeze(-1), entropy


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Eq. 16 as the sum it is, not as a recursion: ``A_t = sum_{t' >= t} (gamma lam)^(t' - t) delta_t'``."""
    v = values * mask
    delta = (rewards + gamma * torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], 1) - v) * mask
    t = torch.arange(delta.shape[1])
    lag = t[None, :] - t[:, None]  # lag[t, t'] = t' - t
    discount = torch.where(lag >= 0, (gamma * lam) ** lag.clamp(min=0).double(), 0.0).float()
    return (delta @ discount.T) * mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the tokens ``mask`` keeps."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """The loss from its per-token terms, as ``Options.aggregation`` says."""
    if how == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    if how == "bnpo":
        return masked_mean(per_token, mask)
    return (per_token * mask).sum() / per_token.numel()  # dr_grpo: N x C, C the batch's padded width


def correction(old, sampler, mask, o: Options) -> tuple[torch.Tensor, torch.Tensor]:
    """``(surrogate weights, loss mask)``: rho = pi_old / pi_sampler per token, or its product over the
    completion; ``*_truncate`` weighs by min(rho, cap) (TIS), ``*_mask`` drops rho outside [1/cap, cap] (MIS)."""
    if o.correction == "none":
        return torch.ones_like(mask), mask
    log_rho = (old - sampler) * mask
    if o.correction.startswith("sequence"):
        log_rho = log_rho.sum(1, keepdim=True).expand_as(mask)
    if o.correction.endswith("truncate"):
        return log_rho.exp().clamp(max=o.correction_cap), mask
    return torch.ones_like(mask), mask * (log_rho.abs() <= math.log(o.correction_cap))


@torch.no_grad()
def targets(policy, critic, ref, ro, rewards, mask, o: Options) -> dict[str, torch.Tensor]:
    """What the update holds fixed: old log-probs, per-token KL, old values, advantages, returns."""
    old, _ = policy_outputs(policy, ro)
    kl = torch.zeros_like(mask)
    if o.kl_coef:
        d = policy_outputs(ref, ro)[0] - old
        kl = (d.exp() - d - 1) * mask
    last = mask - torch.cat([mask[:, 1:], torch.zeros_like(mask[:, :1])], 1)  # 1 on a right-padded row's last token
    r = rewards.unsqueeze(1) * last - o.kl_coef * kl
    old_values = at_completion(critic, ro) * mask
    adv = gae(r, old_values, mask, o.gamma, o.lam_actor)
    if o.whiten:
        centred = (adv - masked_mean(adv, mask)) * mask
        adv = centred / (masked_mean(centred**2, mask) + 1e-8).sqrt()
    returns = (gae(r, old_values, mask, o.gamma, o.lam_critic) + old_values) * mask
    return {"old": old, "kl": kl, "old_values": old_values, "adv": adv, "returns": returns}


def adamw_step(model, optimizer, loss: torch.Tensor, max_norm: float) -> float:
    """One AdamW step on ``loss``, the global gradient norm clipped to ``max_norm`` first (0: not)."""
    optimizer.zero_grad()
    loss.backward()
    if max_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def ppo_step(policy, critic, ref, optimizers, ro, rewards, o: Options, warmup: bool = False) -> dict[str, float]:
    """One step on rollouts ``ro`` and their rewards; ``optimizers``: the policy's and the critic's."""
    mask = ro.completion_mask.float()
    if o.mask_truncated:
        mask = mask * (~ro.truncated).float().unsqueeze(1)
    t = targets(policy, critic, ref, ro, rewards, mask, o)
    weights, loss_mask = correction(t["old"], ro.sampler_logprobs, mask, o)
    policy_losses, value_losses = [], []
    for _ in range(0 if warmup else o.iterations):
        logp, entropy = policy_outputs(policy, ro)
        rho = torch.exp(logp - t["old"])
        surrogate = torch.minimum(rho * t["adv"], rho.clamp(1 - o.clip_low, 1 + o.clip_high) * t["adv"])
        loss = aggregate(-surrogate * weights - o.entropy_coef * entropy, loss_mask, o.aggregation)
        policy_losses.append(adamw_step(policy, optimizers[0], loss, o.policy_max_norm))
    for _ in range(o.iterations * o.critic_epochs):
        v, v_old, ret = at_completion(critic, ro), t["old_values"], t["returns"]
        v_clipped = v_old + (v - v_old).clamp(-o.value_clip, o.value_clip)
        loss = masked_mean(0.5 * torch.maximum((v - ret) ** 2, (v_clipped - ret) ** 2), mask)
        value_losses.append(adamw_step(critic, optimizers[1], loss, o.critic_max_norm))
    reported = value_losses if warmup else value_losses[: o.iterations]  # the passes beside the policy's
    return {
        "loss": sum(policy_losses) / max(len(policy_losses), 1),
        "value_loss": sum(reported) / len(reported),
        "kl": masked_mean(t["kl"], mask).item(),
    } | critic_statistics(t["old_values"], t["returns"], mask)


def critic_statistics(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Explained variance 1 - Var(R - V) / Var(R) of the old values, the returns' mean and (population) std."""

    def _var(x: torch.Tensor) -> torch.Tensor:
        return masked_mean((x - masked_mean(x, mask)) ** 2, mask)

    explained = 1 - _var(returns - values) / _var(returns) if _var(returns) > 0 else torch.tensor(0.0)
    return {
        "explained_variance": explained.item(),
        "returns_mean": masked_mean(returns, mask).item(),
        "returns_std": _var(returns).sqrt().item(),
    }


def adapted_kl_coef(beta: float, kl: float, target: float, horizon: int) -> float:
    """Ziegler et al. 2019's proportional controller, after a step that updated the policy:
    ``beta (1 + K e)``, ``e = clip(kl / target - 1, -0.2, 0.2)``, ``K = 10 / horizon`` (the set's unit)."""
    return beta * (1 + max(-0.2, min(0.2, kl / target - 1)) * 10 / horizon)
