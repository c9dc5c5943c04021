"""A third algorithm for tests/unit/test_catalog.py, written as a user would add one: this module and
one catalog entry (tests/unit/toy_catalog.py), no edit under ``tasks/`` or ``flows/``.

Plain REINFORCE (Williams 1992, eq. 11) with a batch-mean baseline: each completion's advantage is
its reward minus the step's mean reward, and the loss is ``-A_i * (1/|o_i|) sum_t log pi(o_i,t)``,
averaged over completions; one update per batch, no ratio, no clipping, no KL (no reference)."""

from __future__ import annotations

from pathlib import Path

import torch

from grpoflow import metric_names as M
from grpoflow.config import Params
from grpoflow.rl.algorithm import Algorithm, BuiltTrainer, register
from grpoflow.rl.batch import Batch, MicroBatch
from grpoflow.rl.trainer import PolicyTrainer, TrainerInputs


class ReinforceTrainer(PolicyTrainer):
    """The shared loop with batch-mean-baseline advantages and the plain policy-gradient loss."""

    def __init__(self, inputs: TrainerInputs):
        super().__init__(inputs, kl_coef=0.0)

    def update(self, step: int, b: Batch) -> dict[str, float]:
        """One pass of the policy-gradient loss over the batch."""
        advantages = self.ranks.batch_wide(lambda r: r - r.mean(), b.rewards.float())

        def policy_loss(mb: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
            mask = mb.mask.to(mb.logp.dtype)
            mean_logp = (mb.logp * mask).sum(1) / mask.sum(1).clamp(min=1)
            return -(advantages[mb.sl].to(mb.logp.dtype) * mean_logp).mean(), {M.CLIP_RATIO: 0.0}

        return self._micro_batch_loop(step, b, None, policy_loss)


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> BuiltTrainer:
    return BuiltTrainer(ReinforceTrainer(inputs))


ALGORITHM = register(Algorithm("reinforce", _build))
