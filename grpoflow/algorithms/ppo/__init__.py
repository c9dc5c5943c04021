"""The PPO baseline (Schulman et al. 2017; RLHF form of Ouyang et al. 2022): a critic, GAE and the KL
penalty in the reward. Its settings are the ``ppo`` section (:mod:`.config`), its update
:mod:`.update`, its critic :mod:`.critic`."""

from grpoflow.algorithms.entry import Entry

ENTRY = Entry(
    name="ppo",
    title="PPO",
    module="grpoflow.algorithms.ppo.update",
    config="grpoflow.algorithms.ppo.config",
    kl_key="ppo.kl_coef",
    curves=("reward_mean", "kl", "value_loss", "explained_variance", "val_accuracy"),
    critic=True,
    stage_module="tasks.ppo",
    # A smoke run takes the warm-up path, leaving the other step to the policy, and tunes the warm-up
    # below a trial's steps.
    smoke={"ppo.critic_warmup_steps": 1, "tune.ppo.critic_warmup_steps.high": 1},
)
