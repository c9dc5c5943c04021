"""GRPO's update (DeepSeekMath, Shao et al. 2024, Algorithm 1), on a DeepSpeed engine.

Group-relative advantages replace the critic; reference log-probs from the frozen reference are
computed once per batch; mu updates of the clipped objective follow, with old log-probs taken
once before the first (with mu = 1 they equal the current ones, so no extra forward is needed,
unless the KL penalty is folded into the reward: ``grpo.kl_placement: reward`` needs the sampling
policy's log-probs before the advantages).
Rollouts, rewards, metrics and the loop are shared with PPO (:mod:`grpoflow.rl`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpoflow import metric_names as M
from grpoflow import rules
from grpoflow.advantages import ESTIMATORS
from grpoflow.algorithm import Algorithm, BuiltTrainer
from grpoflow.config import GRPOConfig, Params
from grpoflow.engine import optimizer_step
from grpoflow.losses import grpo_loss, kl_penalised_rewards
from grpoflow.rl import Batch, PolicyTrainer, TrainerInputs, masked_mean, micro_slices


class GRPOTrainer(PolicyTrainer):
    """GRPO: the shared loop with group-relative advantages and a KL term in the loss."""

    def __init__(self, inputs: TrainerInputs, *, grpo: GRPOConfig):
        super().__init__(inputs, kl_coef=grpo.beta)
        self.grpo = grpo

    def update(self, step: int, b: Batch) -> dict[str, float]:
        """mu clipped-surrogate updates of the policy on one batch of groups."""
        cfg, eng, g = self.cfg, self.engine, self.grpo
        ref_logp = self._frozen_logprobs(self.ref, b.ids, b.attn, b.start) if self.ref is not None else None
        in_reward = g.kl_placement == "reward" and ref_logp is not None
        old_logp = (
            self._frozen_logprobs(eng.module, b.ids, b.attn, b.start) if cfg.num_iterations > 1 or in_reward else None
        )
        rewards, reward_kl = b.rewards, None
        if in_reward:  # PPO-style: the penalty shapes the reward, and the loss has no KL term
            rewards, reward_kl = kl_penalised_rewards(
                b.rewards, old_logp, ref_logp, b.mask, self.state.beta, g.kl_estimator
            )
        adv = ESTIMATORS[g.advantage_estimator](rewards, b.group_size, g)
        micro, engines = eng.train_micro_batch_size_per_gpu(), (eng,)
        sums = {M.LOSS: 0.0, M.KL: 0.0, M.CLIP_RATIO: 0.0, M.ENTROPY: 0.0}
        seen: dict[str, list[float]] = {}
        n = 0
        eng.train()
        for _ in range(cfg.num_iterations):
            for sl in micro_slices(len(b.ids), micro, *engines):
                logp, ent = self._policy_logprobs(eng, b, sl)
                old = old_logp[sl] if old_logp is not None else logp.detach()
                weights, mask = self._corrected(old, b, sl, seen)
                loss, m = grpo_loss(
                    logp,
                    old,
                    adv[sl],
                    mask,
                    ref_logp=ref_logp[sl] if ref_logp is not None and not in_reward else None,
                    beta=self.state.beta,
                    clip_eps=cfg.clip_eps,
                    clip_eps_high=cfg.clip_eps_high,
                    ratio_level=g.ratio_level,
                    aggregation=cfg.aggregation,
                    kl_estimator=g.kl_estimator,
                    entropy=ent,
                    entropy_coef=cfg.entropy_coef,
                    token_weights=weights,
                )
                if not torch.isfinite(loss):
                    self.health.observe(step, {M.LOSS: float(loss)})  # raises TrainingDiverged
                eng.backward(loss)
                optimizer_step(eng)
                n += 1
                sums[M.LOSS] += loss.item()
                if M.KL in m:
                    sums[M.KL] += m[M.KL]
                elif reward_kl is not None:
                    sums[M.KL] += masked_mean(reward_kl[sl], b.mask[sl])
                sums[M.CLIP_RATIO] += m[M.CLIP_RATIO]
                sums[M.ENTROPY] += masked_mean(ent, b.mask[sl])
        return {k: v / n for k, v in sums.items()} | self._mismatch(seen)


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> BuiltTrainer:
    return BuiltTrainer(GRPOTrainer(inputs, grpo=params.grpo))


ALGORITHM = Algorithm("grpo", __name__, ("grpo",), lambda p: rules.kl_coef(p, "grpo"), _build)
