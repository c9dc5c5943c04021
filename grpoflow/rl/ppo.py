"""The PPO baseline (Schulman et al. 2017; RLHF form of Ouyang et al. 2022): a critic the size of
the policy, token-level rewards (the verifier's reward on the last token, a per-token KL penalty
toward the reference), GAE advantages, the clipped policy loss and a clipped value loss, the
critic on its own DeepSpeed engine and optimizer. Everything else is shared with GRPO.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModel

from grpoflow import metric_names as M
from grpoflow.config import Params, PPOConfig, rules
from grpoflow.models.engine import build_engine, optimizer_step
from grpoflow.rl import shared_prefix as sp
from grpoflow.rl.advantages import CRITIC_ESTIMATOR_FNS, masked_whiten
from grpoflow.rl.algorithm import Algorithm, BuiltTrainer
from grpoflow.rl.losses import grpo_loss, kl_k3
from grpoflow.rl.trainer import Batch, MicroBatch, PolicyTrainer, TrainerInputs, masked_mean


class ValueModel(torch.nn.Module):
    """A transformer trunk (by default the SFT model's) with a scalar head on every position."""

    def __init__(self, trunk: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.trunk = trunk
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(cls, path: str) -> ValueModel:
        """A critic whose trunk is the pretrained model at ``path`` and whose head starts at zero."""
        trunk = AutoModel.from_pretrained(path)
        return cls(trunk, trunk.config.hidden_size)

    def forward(self, input_ids, attention_mask, position_ids=None) -> torch.Tensor:
        """``V(s_t)`` at every position: ``(N, T)``."""
        hidden = self.trunk(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.head(hidden).squeeze(-1)


def completion_values(critic, ids, attn, start: int, shared_prefix: bool = True) -> torch.Tensor:
    """``V(s_t)`` for each completion token t: the value at the position that predicts it.
    ``shared_prefix``: each group's prompt encoded once (:mod:`grpoflow.rl.shared_prefix`), same values."""
    packed = sp.packed_for(critic, ids, attn, start) if shared_prefix else None
    if packed is not None:
        values = critic(packed.input_ids, sp.mask_for(critic, packed.mask), packed.position_ids)
        return sp.gather_rows(values[:, packed.keep_from :], packed).float()
    position_ids = (attn.long().cumsum(-1) - 1).clamp(min=0)
    return critic(ids, attn, position_ids)[:, start - 1 : -1].float()


def token_rewards(rewards: torch.Tensor, mask: torch.Tensor, kl: torch.Tensor | None, kl_coef: float) -> torch.Tensor:
    """The sequence reward on each completion's last counted token, minus ``kl_coef * kl`` per token."""
    r = torch.zeros_like(mask)
    last = (mask.cumsum(1) * mask).argmax(1)
    has_tokens = mask.sum(1) > 0
    r[has_tokens, last[has_tokens]] = rewards[has_tokens].to(r.dtype)
    if kl is not None and kl_coef:
        r = r - kl_coef * kl * mask
    return r


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the counted tokens (0 when returns are constant)."""
    m = mask.bool()
    var = returns[m].var(correction=0)
    return float(1 - (returns[m] - values[m]).var(correction=0) / var) if var > 0 else 0.0


class PPOTrainer(PolicyTrainer):
    """The PPO baseline: the shared loop with a critic, GAE and the KL penalty in the reward."""

    def __init__(self, inputs: TrainerInputs, *, ppo: PPOConfig, critic_engine):
        super().__init__(inputs, kl_coef=ppo.kl_coef)
        self.ppo, self.critic = ppo, critic_engine

    @torch.no_grad()
    def _old_values(self, b: Batch) -> torch.Tensor:
        shared = self.cfg.engine.shared_prefix
        return torch.cat(
            [completion_values(self.critic, b.ids[sl], b.attn[sl], b.start, shared) for sl in self._plan(b)]
        )

    def update(self, step: int, b: Batch) -> dict[str, float]:
        """mu clipped updates of the policy and the critic on one batch."""
        cfg, ppo, eng, critic = self.cfg, self.ppo, self.engine, self.critic
        critic.set_train_micro_batch_size(eng.train_micro_batch_size_per_gpu())
        critic.set_train_batch_size(len(b.ids) * self.world)
        old_logp = self._frozen_logprobs(eng.module, b)
        ref_logp = self._frozen_logprobs(self.ref, b) if self.ref is not None else None
        kl = kl_k3(old_logp, ref_logp) if ref_logp is not None else None
        old_values = self._old_values(b) * b.mask
        rewards = token_rewards(b.rewards, b.mask, kl, self.state.beta)
        adv, returns = CRITIC_ESTIMATOR_FNS["gae"](rewards, old_values, b.mask, ppo)
        if ppo.whiten_advantages:
            adv = masked_whiten(adv, b.mask)

        def policy_loss(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
            loss, m = grpo_loss(
                mb.logp,
                mb.old,
                adv[mb.sl],
                mb.mask,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                aggregation=cfg.aggregation,
                entropy=mb.entropy,
                entropy_coef=cfg.entropy_coef,
                token_weights=mb.weights,
            )
            return loss, {M.CLIP_RATIO: m[M.CLIP_RATIO]}

        def critic_step(mb: MicroBatch) -> dict[str, float]:
            """The clipped value loss on the micro-batch, after the policy's step on it."""
            sl = mb.sl
            values = completion_values(critic, b.ids[sl], b.attn[sl], b.start, cfg.engine.shared_prefix)
            clipped = old_values[sl] + (values - old_values[sl]).clamp(-ppo.cliprange_value, ppo.cliprange_value)
            vf = 0.5 * torch.maximum((values - returns[sl]) ** 2, (clipped - returns[sl]) ** 2)
            value_loss = (vf * b.mask[sl]).sum() / b.mask[sl].sum().clamp(min=1)
            critic.backward(value_loss * mb.scale)
            optimizer_step(critic)
            return {M.VALUE_LOSS: value_loss.item()}

        out = self._micro_batch_loop(
            step, b, old_logp, policy_loss, tallies=(M.VALUE_LOSS,), critic=critic, critic_step=critic_step
        )
        out[M.KL] = masked_mean(kl, b.mask) if kl is not None else 0.0
        out[M.EXPLAINED_VARIANCE] = explained_variance(old_values, returns, b.mask)
        return out


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> BuiltTrainer:
    critic_model = ValueModel.from_pretrained(str(reference_dir))
    # The critic steps with the policy, micro-batch for micro-batch (see PPOTrainer.update).
    critic_cfg = params.ppo.critic_engine.model_copy(update={"micro_batch_size": params.rl.engine.micro_batch_size})
    critic = build_engine(critic_model, critic_cfg, inputs.engine.train_batch_size())
    return BuiltTrainer(PPOTrainer(inputs, ppo=params.ppo, critic_engine=critic), {"critic": critic})


ALGORITHM = Algorithm("ppo", __name__, ("ppo",), lambda p: rules.kl_coef(p, "ppo"), _build)
