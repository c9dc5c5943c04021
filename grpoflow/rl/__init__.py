"""Reinforcement learning on verifier rewards: the loop every algorithm shares (:mod:`.trainer`),
the step's batch (:mod:`.step_batch`), the learner an update is written against (:mod:`.learner`),
how a run is built from params (:mod:`.run`, :mod:`.algorithm`; each algorithm's own update is in
its folder, :mod:`grpoflow.algorithms`) and the pieces the updates are made of: rewards,
advantages, log-probs, losses, shared-prefix packing, micro-batch planning, reference refresh,
health, preflight and step timing.

Reading order for one GRPO step (docs/architecture.md traces it in full):

1. :meth:`grpoflow.rl.trainer.Trainer.step`: the step's batch (:class:`grpoflow.rl.step_batch.StepBatches`:
   rollouts from :mod:`grpoflow.rollout`, rewards from :class:`grpoflow.rl.rewards.WeightedReward`),
   the algorithm's ``update(batch, learner)``, then weight sync.
2. :meth:`grpoflow.algorithms.grpo.update.GRPO.update`: reference log-probs, advantages, the micro-batches
   (:meth:`grpoflow.rl.learner.Learner.micro_batches`, planned by :mod:`grpoflow.rl.micro_batches`)
   and one optimizer step each (:meth:`grpoflow.rl.learner.Learner.step`).
3. :mod:`grpoflow.rl.advantages` (``group_advantages``), :mod:`grpoflow.rl.logprobs`
   (``completion_logprobs``), :mod:`grpoflow.rl.losses` (``clipped_surrogate_loss``): the formulas.
4. :mod:`grpoflow.models.engine` (``optimizer_step``) for the DeepSpeed update; :mod:`grpoflow.rl.run`
   for how the trainer is built; ``tests/unit/reference_grpo.py`` for the whole step in plain torch.
"""
