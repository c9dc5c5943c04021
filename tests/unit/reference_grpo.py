"""A reference GRPO step in plain torch, written from the paper, as an oracle for the trainer.

DeepSeekMath (Shao et al. 2024), eq. 3, the objective maximised over G completions o_i of a prompt:

    J = 1/G sum_i 1/|o_i| sum_t { min(rho_it A_i, clip(rho_it, 1 - eps, 1 + eps) A_i) - beta D_it }
    rho_it = pi(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)
    D_it   = pi_ref / pi - log(pi_ref / pi) - 1        (eq. 4: the k3 estimator of KL(pi || pi_ref))
    A_i    = (r_i - mean(r)) / std(r)                   (section 4.1.2, outcome supervision)

so the aggregation is the paper's (and the default's, ``rl.aggregation: grpo``): a mean over each
completion's tokens, then over completions. Every formula is restated here on purpose: nothing of
grpoflow's loss, advantage or log-prob code is imported, so a wrong loss there fails the comparison.
The update is torch's AdamW on the summed-up loss, after clipping the global gradient norm.
"""

from __future__ import annotations

import torch


def token_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """log pi(o_it | q, o_i<t), ``(N, C)``: one full forward over [left-padded prompt | completion]."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask, completion_mask], dim=1)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift the positions
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits.float()
    p = prompt_ids.shape[1]
    logp_all = torch.log_softmax(logits[:, p - 1 : -1], dim=-1)  # the logit at t predicts token t + 1
    return logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def group_advantages(rewards: torch.Tensor, g: int, eps: float) -> torch.Tensor:
    """A_i = (r_i - mean) / (std + eps) within each group of G (population std; eps keeps 0/0 at 0)."""
    r = rewards.view(-1, g)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + eps)).view(-1)


def grpo_objective(logp, old_logp, ref_logp, adv, mask, beta: float, clip_eps: float) -> torch.Tensor:
    """J of eq. 3 (to maximise), with the k3 KL term; ``mask`` marks the tokens of each o_i."""
    rho = torch.exp(logp - old_logp)
    a = adv.unsqueeze(1)
    surrogate = torch.minimum(rho * a, rho.clamp(1 - clip_eps, 1 + clip_eps) * a)
    log_ref_ratio = ref_logp - logp
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1
    per_token = (surrogate - beta * kl) * mask
    return (per_token.sum(1) / mask.sum(1)).mean()  # 1/|o_i| sum_t, then 1/G sum_i (over all groups)


def reference_step(
    policy,
    ref,
    optimizer,
    rollouts,
    rewards,
    *,
    g: int,
    beta: float,
    clip_eps: float,
    adv_eps: float,
    max_grad_norm: float,
    iterations: int = 1,
) -> list[float]:
    """``iterations`` (mu) AdamW steps of GRPO on one batch; the loss (-J) of each."""
    batch = (rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids, rollouts.completion_mask)
    mask = rollouts.completion_mask.float()
    adv = group_advantages(rewards, g, adv_eps)
    with torch.no_grad():
        ref_logp = token_logprobs(ref, *batch)
        old_logp = token_logprobs(policy, *batch)  # pi_old: the policy that sampled, before any update
    losses = []
    for _ in range(iterations):
        loss = -grpo_objective(token_logprobs(policy, *batch), old_logp, ref_logp, adv, mask, beta, clip_eps)
        optimizer.zero_grad()
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
        optimizer.step()
        losses.append(loss.item())
    return losses
