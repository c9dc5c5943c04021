"""GRPO (DeepSeekMath, Shao et al. 2024): group-relative advantages instead of a critic, and a KL
term in the loss. Its settings are the ``grpo`` section (:mod:`.config`), its update :mod:`.update`."""

from grpoflow.algorithms.entry import Entry

ENTRY = Entry(
    name="grpo",
    title="GRPO",
    module="grpoflow.algorithms.grpo.update",
    config="grpoflow.algorithms.grpo.config",
    kl_key="grpo.beta",
    curves=("reward_mean", "kl", "entropy", "val_accuracy"),
    stage_module="tasks.grpo",
)
