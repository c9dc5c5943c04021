"""Reinforcement learning on verifier rewards: the loop shared by GRPO and the PPO baseline
(:mod:`.trainer`), how a run is built from params (:mod:`.run`, :mod:`.algorithm`), each
algorithm's update (:mod:`.grpo`, :mod:`.ppo`) and the pieces they are made of: rewards,
advantages, log-probs, losses, shared-prefix packing, micro-batch planning, reference refresh,
health, preflight and step timing.

Reading order for one GRPO step (docs/architecture.md traces it in full):

1. :meth:`grpoflow.rl.trainer.PolicyTrainer.step`: rollouts (``_scored``, :mod:`grpoflow.rollout`), rewards
   (:class:`grpoflow.rl.rewards.WeightedReward`), the algorithm's ``update``, then weight sync.
2. :meth:`grpoflow.rl.grpo.GRPOTrainer.update`: reference log-probs, advantages, the micro-batch loop
   (its micro-batches from :mod:`grpoflow.rl.micro_batches`).
3. :mod:`grpoflow.rl.advantages` (``group_advantages``), :mod:`grpoflow.rl.logprobs`
   (``completion_logprobs``), :mod:`grpoflow.rl.losses` (``clipped_surrogate_loss``): the formulas.
4. :mod:`grpoflow.models.engine` (``optimizer_step``) for the DeepSpeed update; :mod:`grpoflow.rl.run`
   for how the trainer is built; ``tests/unit/reference_grpo.py`` for the whole step in plain torch.
"""
