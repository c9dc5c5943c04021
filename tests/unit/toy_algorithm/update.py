"""REINFORCE (Williams 1992, eq. 11) with a baseline and a k3 KL penalty toward the reference in the
loss (Schulman 2020's estimator), on the learner's public contract: per token
``-(r - b) * w_t * log pi(o_t) + kl_coef * k3_t - entropy_coef * H_t`` (``w_t``: rollout correction's
weight), reduced as ``rl.aggregation`` says (by default the mean over each completion, then over
completions). One pass: with ``rl.num_iterations`` > 1 it would need the old log-probs."""

from __future__ import annotations

from pathlib import Path

import torch

from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.rl.algorithm import Algorithm, Built, register
from grpoflow.rl.batch import Batch, masked_mean
from grpoflow.rl.inputs import TrainerInputs
from grpoflow.rl.learner import Learner
from grpoflow.rl.losses import kl_k3
from tests.unit.toy_algorithm.config import ReinforceKLConfig


class ReinforceKL:
    """One pass of the penalised policy gradient over the batch."""

    def __init__(self, settings: ReinforceKLConfig):
        self.settings = settings

    def update(self, b: Batch, learner: Learner) -> dict[str, float]:
        """One optimizer step per micro-batch of the penalised policy-gradient loss."""
        ref = learner.reference_logprobs(b)
        rewards = b.rewards.float()
        centred = self.settings.baseline == "batch_mean"
        advantages = learner.ranks.batch_wide(lambda r: r - r.mean(), rewards) if centred else rewards
        micro_batches = learner.micro_batches(b)
        for mb in micro_batches:
            mask = mb.mask.to(mb.logp.dtype)
            weights = mb.weights if mb.weights is not None else torch.ones_like(mb.logp)
            per_token = -advantages[mb.sl].to(mb.logp.dtype)[:, None] * weights * mb.logp
            kl = kl_k3(mb.logp, ref[mb.sl]) if ref is not None else torch.zeros_like(mb.logp)
            per_token = per_token + learner.kl_coef * kl - learner.cfg.entropy_coef * mb.entropy
            learner.step(mb, learner.aggregate(per_token, mask), {M.KL: masked_mean(kl, mask)})
        return micro_batches.metrics()


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> Built:
    return Built(ReinforceKL(params.reinforce_kl))  # a section the schema adds from config.py


ALGORITHM = register(Algorithm("reinforce_kl", _build))
