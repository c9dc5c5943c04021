"""GRPO's update (DeepSeekMath, Shao et al. 2024, Algorithm 1), written against the learner's
contract (:mod:`grpoflow.rl.learner`); tests/unit/reference_grpo.py is the same step in plain torch.

Group-relative advantages replace the critic; reference log-probs from the frozen reference are
computed once per batch; mu updates of the clipped objective follow, with old log-probs taken once
before the first (with mu = 1 they equal the current ones, so no extra forward is needed, unless
the KL penalty is folded into the reward: ``grpo.kl_placement: reward`` needs the sampling policy's
log-probs before the advantages). Rollouts, rewards, metrics and the loop are shared
(:mod:`grpoflow.rl.trainer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpoflow import metric_names as M
from grpoflow.algorithms.grpo.config import GRPOConfig
from grpoflow.config import Params
from grpoflow.rl.advantages import ESTIMATORS
from grpoflow.rl.algorithm import Algorithm, Built, register
from grpoflow.rl.batch import Batch, masked_mean
from grpoflow.rl.inputs import TrainerInputs
from grpoflow.rl.learner import Learner
from grpoflow.rl.losses import clipped_surrogate_loss, kl_penalised_rewards


@dataclass(frozen=True)
class GRPO:
    """GRPO: group-relative advantages and a KL term in the loss (or in the reward)."""

    grpo: GRPOConfig

    def update(self, b: Batch, learner: Learner) -> dict[str, float]:
        """mu clipped-surrogate updates of the policy on one batch of groups."""
        cfg, g, beta = learner.cfg, self.grpo, learner.kl_coef
        ref_logp = learner.reference_logprobs(b)
        in_reward = g.kl_placement == "reward" and ref_logp is not None
        old_logp = learner.old_logprobs(b) if cfg.num_iterations > 1 or in_reward else None
        rewards, reward_kl = b.rewards, None
        if in_reward:  # PPO-style: the penalty shapes the reward, and the loss has no KL term
            rewards, reward_kl = kl_penalised_rewards(b.rewards, old_logp, ref_logp, b.mask, beta, g.kl_estimator)
        # Over the whole step's groups: batch-level statistics must not depend on the process count.
        adv = learner.ranks.batch_wide(lambda r: ESTIMATORS[g.advantage_estimator](r, b.group_size, g), rewards)
        loss_ref = None if in_reward else ref_logp  # with the penalty in the reward, no KL term

        micro_batches = learner.micro_batches(b, old_logp)
        for mb in micro_batches:
            loss, m = clipped_surrogate_loss(
                mb.logp,
                mb.old,
                adv[mb.sl],
                mb.mask,
                ref_logp=loss_ref[mb.sl] if loss_ref is not None else None,
                beta=beta,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                ratio_level=g.ratio_level,
                aggregation=cfg.aggregation,
                kl_estimator=g.kl_estimator,
                entropy=mb.entropy,
                entropy_coef=cfg.entropy_coef,
                token_weights=mb.weights,
            )
            kl = m.get(M.KL)
            if kl is None:  # the reward's penalty, or none
                kl = masked_mean(reward_kl[mb.sl], b.mask[mb.sl]) if reward_kl is not None else 0.0
            learner.step(mb, loss, {M.KL: kl, M.CLIP_RATIO: m[M.CLIP_RATIO]})
        return micro_batches.metrics()


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> Built:
    return Built(GRPO(params.grpo))


ALGORITHM = register(Algorithm("grpo", _build))
