"""GRPO's update (DeepSeekMath, Shao et al. 2024, Algorithm 1), on a DeepSpeed engine.

Group-relative advantages replace the critic; reference log-probs from the frozen reference are
computed once per batch; mu updates of the clipped objective follow, with old log-probs taken
once before the first (with mu = 1 they equal the current ones, so no extra forward is needed,
unless the KL penalty is folded into the reward: ``grpo.kl_placement: reward`` needs the sampling
policy's log-probs before the advantages).
Rollouts, rewards, metrics and the loop are shared with PPO (:mod:`grpoflow.rl.trainer`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpoflow import metric_names as M
from grpoflow.config import GRPOConfig, Params
from grpoflow.rl.advantages import ESTIMATORS
from grpoflow.rl.algorithm import Algorithm, BuiltTrainer, register
from grpoflow.rl.batch import Batch, MicroBatch, masked_mean
from grpoflow.rl.losses import clipped_surrogate_loss, kl_penalised_rewards
from grpoflow.rl.trainer import PolicyTrainer, TrainerInputs


class GRPOTrainer(PolicyTrainer):
    """GRPO: the shared loop with group-relative advantages and a KL term in the loss."""

    def __init__(self, inputs: TrainerInputs, *, grpo: GRPOConfig):
        super().__init__(inputs, kl_coef=grpo.beta)
        self.grpo = grpo

    def update(self, step: int, b: Batch) -> dict[str, float]:
        """mu clipped-surrogate updates of the policy on one batch of groups."""
        cfg, eng, g = self.cfg, self.engine, self.grpo
        ref_logp = self._frozen_logprobs(self.ref, b) if self.ref is not None else None
        in_reward = g.kl_placement == "reward" and ref_logp is not None
        old_logp = self._frozen_logprobs(eng.module, b) if cfg.num_iterations > 1 or in_reward else None
        rewards, reward_kl = b.rewards, None
        if in_reward:  # PPO-style: the penalty shapes the reward, and the loss has no KL term
            rewards, reward_kl = kl_penalised_rewards(
                b.rewards, old_logp, ref_logp, b.mask, self.state.beta, g.kl_estimator
            )
        # Over the whole step's groups: batch-level statistics must not depend on the process count.
        adv = self.ranks.batch_wide(lambda r: ESTIMATORS[g.advantage_estimator](r, b.group_size, g), rewards)
        loss_ref = ref_logp if not in_reward else None  # with the penalty in the reward, no KL term

        def policy_loss(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
            loss, m = clipped_surrogate_loss(
                mb.logp,
                mb.old,
                adv[mb.sl],
                mb.mask,
                ref_logp=loss_ref[mb.sl] if loss_ref is not None else None,
                beta=self.state.beta,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                ratio_level=g.ratio_level,
                aggregation=cfg.aggregation,
                kl_estimator=g.kl_estimator,
                entropy=mb.entropy,
                entropy_coef=cfg.entropy_coef,
                token_weights=mb.weights,
            )
            if M.KL in m:
                kl = m[M.KL]
            else:  # the reward's penalty, or none
                kl = masked_mean(reward_kl[mb.sl], b.mask[mb.sl]) if reward_kl is not None else 0.0
            return loss, {M.KL: kl, M.CLIP_RATIO: m[M.CLIP_RATIO]}

        return self._micro_batch_loop(step, b, old_logp, policy_loss, tallies=(M.KL,))


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> BuiltTrainer:
    return BuiltTrainer(GRPOTrainer(inputs, grpo=params.grpo))


ALGORITHM = register(Algorithm("grpo", _build))
