"""The PPO baseline (Schulman et al. 2017; RLHF form of Ouyang et al. 2022), written against the
learner's contract (:mod:`grpoflow.rl.learner`); tests/unit/reference_ppo.py is the same step in plain
torch. A critic the size of the policy (:mod:`grpoflow.algorithms.ppo.critic`) on its own DeepSpeed engine and
optimizer, token-level rewards (the verifier's reward on the last token, a per-token KL penalty
toward the reference), GAE advantages, the clipped policy loss and a clipped value loss.

The critic's first ``ppo.critic_warmup_steps`` steps fit it alone on the frozen policy's rollouts
(VAPO's value pretraining, Yue et al. 2025), and GAE may give its targets a lambda of their own
(``ppo.lam_critic``; 1.0 in VAPO and Open-Reasoner-Zero, Hu et al. 2025).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpoflow import metric_names as M
from grpoflow.algorithms.ppo.config import PPOConfig
from grpoflow.algorithms.ppo.critic import (
    clipped_value_loss,
    completion_values,
    critic_metrics,
    initial_critic,
    token_rewards,
)
from grpoflow.config import Params
from grpoflow.models.engine import build_engine, optimizer_step
from grpoflow.rl import micro_batches
from grpoflow.rl.advantages import CRITIC_ESTIMATOR_FNS, masked_whiten
from grpoflow.rl.algorithm import Algorithm, Built, register
from grpoflow.rl.batch import Batch
from grpoflow.rl.inputs import TrainerInputs
from grpoflow.rl.learner import Learner, Tally
from grpoflow.rl.losses import clipped_surrogate_loss, kl_k3

# What the batch's targets are: (KL to the reference or None, the critic's old values, advantages, returns).
Targets = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class PPO:
    """PPO: a critic (``critic``, a DeepSpeed engine), GAE and the KL penalty in the reward."""

    ppo: PPOConfig
    critic: Any

    def updates_policy(self, step: int) -> bool:
        """Every step after the critic's warm-up (``ppo.critic_warmup_steps``, counted in ``rl.steps``)."""
        return step >= self.ppo.critic_warmup_steps

    def update(self, b: Batch, learner: Learner) -> dict[str, float]:
        """mu clipped updates of the policy and the critic on one batch (of the critic alone in its warm-up)."""
        cfg, critic = learner.cfg, self.critic
        critic.set_train_micro_batch_size(learner.engine.train_micro_batch_size_per_gpu())
        critic.set_train_batch_size(len(b.ids) * learner.ranks.world)
        if not self.updates_policy(learner.global_step):
            return self._warm_up(b, learner)
        old_logp = learner.old_logprobs(b)
        kl, old_values, adv, returns = self._targets(b, learner, old_logp)

        micro = learner.micro_batches(b, old_logp, engines=(critic,))
        for mb in micro:
            loss, m = clipped_surrogate_loss(
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
            learner.step(mb, loss, {M.CLIP_RATIO: m[M.CLIP_RATIO]})
            # The critic's step on the micro-batch, after the policy's: a mean over its tokens.
            value_loss = self._value_step(b, mb.sl, mb.scales.tokens, old_values, returns, learner)
            learner.record(mb, {M.VALUE_LOSS: value_loss})
        out = micro.metrics()
        self._critic_passes(b, old_values, returns, (self.ppo.critic_epochs - 1) * cfg.num_iterations, learner)
        out[M.KL] = learner.ranks.masked_mean(kl, b.mask) if kl is not None else 0.0  # adaptive KL control reads it
        return out | self._critic_metrics(old_values, returns, b.mask, learner) | {M.CRITIC_WARMUP: 0.0}

    def _warm_up(self, b: Batch, learner: Learner) -> dict[str, float]:
        """A warm-up step: ``num_iterations`` x ``ppo.critic_epochs`` passes of the critic's updates
        on the frozen policy's rollouts, with the targets a later step would give it; the policy's
        weights, optimizer and learning-rate schedule are not touched."""
        old_logp, entropy = learner.old_logprobs_and_entropy(b)
        kl, old_values, _, returns = self._targets(b, learner, old_logp)
        passes = learner.cfg.num_iterations * self.ppo.critic_epochs
        value_loss = self._critic_passes(b, old_values, returns, passes, learner)
        return {
            M.VALUE_LOSS: value_loss,
            M.KL: learner.ranks.masked_mean(kl, b.mask) if kl is not None else 0.0,
            M.ENTROPY: learner.ranks.masked_mean(entropy, b.mask),
            M.CRITIC_WARMUP: 1.0,
        } | self._critic_metrics(old_values, returns, b.mask, learner)

    def _targets(self, b: Batch, learner: Learner, old_logp: torch.Tensor) -> Targets:
        """The KL to the reference, the critic's values before the update, GAE's advantages (whitened
        as ``ppo.whiten_advantages`` says) under ``ppo.lam_actor`` and its returns, the critic's
        targets, under ``ppo.lam_critic``."""
        ref_logp = learner.reference_logprobs(b)
        kl = kl_k3(old_logp, ref_logp) if ref_logp is not None else None
        old_values = self._old_values(b, learner) * b.mask
        rewards = token_rewards(b.rewards, b.mask, kl, learner.kl_coef)
        adv, returns = CRITIC_ESTIMATOR_FNS["gae"](rewards, old_values, b.mask, self.ppo)
        if self.ppo.whiten_advantages:
            adv = masked_whiten(adv, b.mask, total=learner.ranks.summed)  # the step's statistics, on every process
        return kl, old_values, adv, returns

    @torch.no_grad()
    def _old_values(self, b: Batch, learner: Learner) -> torch.Tensor:
        shared = learner.cfg.engine.shared_prefix
        return torch.cat(
            [
                completion_values(self.critic, b.ids[sl], b.attn[sl], b.start, shared, learner.rows(b, sl))
                for sl in learner.plan(b)
            ]
        )

    def _value_step(
        self, b: Batch, sl: slice, scale: float, old_values: torch.Tensor, returns: torch.Tensor, learner: Learner
    ) -> torch.Tensor:
        """The clipped value loss on micro-batch ``sl`` (``ppo.cliprange_value`` around the old values),
        a mean over its tokens, its backward (times ``scale``, its share of the step's tokens) and the
        critic's optimizer step; the loss, left on the device."""
        critic = self.critic
        shared = learner.cfg.engine.shared_prefix
        values = completion_values(critic, b.ids[sl], b.attn[sl], b.start, shared, learner.rows(b, sl))
        value_loss = clipped_value_loss(values, old_values[sl], returns[sl], b.mask[sl], self.ppo.cliprange_value)
        critic.backward(value_loss * scale)
        optimizer_step(critic)
        return value_loss.detach()

    def _critic_passes(
        self, b: Batch, old_values: torch.Tensor, returns: torch.Tensor, passes: int, learner: Learner
    ) -> float:
        """``passes`` passes of the critic's updates over the batch on its own (the policy untouched),
        micro-batch for micro-batch as the policy's update takes them; the mean value loss of a pass."""
        critic = self.critic
        critic.train()
        slices = learner.plan(b)
        gas = critic.gradient_accumulation_steps()
        scales = learner.ranks.token_scales(b.mask, slices, gas)
        tally = Tally(passes=max(passes, 1))  # read from the device once, after every pass
        for _ in range(passes):
            for sl, scale in zip(micro_batches.accumulation(slices, critic), scales):
                # Weighed as the policy's update weighs micro-batches: its share of the step's tokens.
                tally.add(M.VALUE_LOSS, self._value_step(b, sl, scale, old_values, returns, learner), scale / gas)
        return tally.means().get(M.VALUE_LOSS, 0.0)

    @staticmethod
    def _critic_metrics(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, learner: Learner) -> dict:
        """:func:`~grpoflow.algorithms.ppo.critic.critic_metrics` over the step's tokens on every process."""
        ranks = learner.ranks
        return critic_metrics(values, returns, mask, ranks.summed if ranks.world > 1 else None)


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> Built:
    model = initial_critic(params, reference_dir)
    # The critic steps with the policy, micro-batch for micro-batch (see PPO.update).
    critic_cfg = params.ppo.critic_engine.model_copy(update={"micro_batch_size": params.rl.engine.micro_batch_size})
    critic = build_engine(model, critic_cfg, inputs.engine.train_batch_size())
    return Built(PPO(params.ppo, critic), {"critic": critic})


def actor_lr(params: Params) -> float:
    """The policy's learning rate under PPO: ``ppo.actor_lr``, else the shared ``rl.engine.lr``."""
    return params.rl.engine.lr if params.ppo.actor_lr is None else params.ppo.actor_lr


ALGORITHM = register(Algorithm("ppo", _build, actor_lr))
