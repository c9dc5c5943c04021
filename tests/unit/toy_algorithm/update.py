"""REINFORCE (Williams 1992, eq. 11) with a baseline and a k3 KL penalty toward the reference in the
loss (Schulman 2020's estimator), on the learner's public contract: per completion
``-(r - b) * mean_t log pi(o_t) + kl_coef * mean_t k3_t``, averaged over completions."""

from __future__ import annotations

from pathlib import Path

from grpoflow import metric_names as M
from grpoflow.rl.algorithm import Algorithm, Built, register
from grpoflow.rl.batch import Batch, masked_mean
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
            per_token = -advantages[mb.sl].to(mb.logp.dtype)[:, None] * mb.logp
            metrics = {}
            if ref is not None:
                kl = kl_k3(mb.logp, ref[mb.sl])
                per_token = per_token + learner.kl_coef * kl
                metrics[M.KL] = masked_mean(kl, mask)
            loss = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
            learner.step(mb, loss, metrics)
        return micro_batches.metrics()


def _build(params, inputs, reference_dir: Path) -> Built:
    return Built(ReinforceKL(params.reinforce_kl))


ALGORITHM = register(Algorithm("reinforce_kl", _build))
