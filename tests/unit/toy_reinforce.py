"""A third algorithm for tests/unit/test_catalog.py, written as a user would add one: this module and
one catalog entry (tests/unit/toy_catalog.py), no edit under ``tasks/`` or ``flows/``.

Plain REINFORCE (Williams 1992, eq. 11) with a batch-mean baseline: each completion's advantage is
its reward minus the step's mean reward, and the loss is ``-A_i * (1/|o_i|) sum_t log pi(o_i,t)``,
averaged over completions; one update per batch, no ratio, no clipping, no KL (no reference)."""

from __future__ import annotations

from pathlib import Path

from grpoflow.config import Params
from grpoflow.rl.algorithm import Algorithm, Built, register
from grpoflow.rl.batch import Batch
from grpoflow.rl.inputs import TrainerInputs
from grpoflow.rl.learner import Learner


class Reinforce:
    """Batch-mean-baseline advantages and the plain policy-gradient loss."""

    def update(self, b: Batch, learner: Learner) -> dict[str, float]:
        """One pass of the policy-gradient loss over the batch."""
        advantages = learner.ranks.batch_wide(lambda r: r - r.mean(), b.rewards.float())
        micro_batches = learner.micro_batches(b)
        for mb in micro_batches:
            mask = mb.mask.to(mb.logp.dtype)
            mean_logp = (mb.logp * mask).sum(1) / mask.sum(1).clamp(min=1)
            learner.step(mb, -(advantages[mb.sl].to(mb.logp.dtype) * mean_logp).mean())
        return micro_batches.metrics()


def _build(params: Params, inputs: TrainerInputs, reference_dir: Path) -> Built:
    return Built(Reinforce())


ALGORITHM = register(Algorithm("reinforce", _build))
