"""The names of training metrics, spelt once: the trainers write them, the health rules, the
history CSV, MLflow, the flow and the comparison read them."""

from __future__ import annotations

# Per step, from the shared loop (grpoflow.rl) and the algorithms' updates.
STEP = "step"
REWARD_MEAN = "reward_mean"
REWARD_STD = "reward_std"
GROUP_REWARD_STD = "group_reward_std"
FRAC_ZERO_STD_GROUPS = "frac_zero_std_groups"
REWARD_PREFIX = "reward/"  # + verifier name: each component of the reward
KL = "kl"
KL_COEF = "kl_coef"
LOSS = "loss"
CLIP_RATIO = "clip_ratio"
ENTROPY = "entropy"
GRAD_NORM = "grad_norm"
COMPLETION_LENGTH_MEAN = "completion_length_mean"
COMPLETION_LENGTH_MAX = "completion_length_max"
FRAC_TRUNCATED = "frac_truncated"
ROLLOUT_TOKENS_PER_S = "rollout_tokens_per_s"
UPDATE_TOKENS_PER_S = "update_tokens_per_s"
STEP_SECONDS = "step_seconds"
ROLLOUT_SECONDS = "rollout_seconds"
UPDATE_SECONDS = "update_seconds"
PEAK_MEMORY_MB = "peak_memory_mb"
NUM_GENERATIONS = "num_generations"
MAX_COMPLETION_LENGTH = "max_completion_length"
MICRO_BATCH_SIZE = "micro_batch_size"
LR = "lr"
HEALTH_SYMPTOMS = "health_symptoms"
VAL_ACCURACY = "val_accuracy"
# PPO's critic.
VALUE_LOSS = "value_loss"
EXPLAINED_VARIANCE = "explained_variance"

# The per-step history CSV (DVC plots), in column order.
HISTORY_FIELDS = [
    STEP,
    REWARD_MEAN,
    REWARD_STD,
    GROUP_REWARD_STD,
    FRAC_ZERO_STD_GROUPS,
    KL,
    KL_COEF,
    LOSS,
    CLIP_RATIO,
    ENTROPY,
    GRAD_NORM,
    COMPLETION_LENGTH_MEAN,
    COMPLETION_LENGTH_MAX,
    FRAC_TRUNCATED,
    ROLLOUT_TOKENS_PER_S,
    UPDATE_TOKENS_PER_S,
    STEP_SECONDS,
    PEAK_MEMORY_MB,
    NUM_GENERATIONS,
    VAL_ACCURACY,
    VALUE_LOSS,
    EXPLAINED_VARIANCE,
]

# A training stage's summary (metrics/<algorithm>.json).
VAL_ACCURACY_START = "val_accuracy_start"
VAL_ACCURACY_GAIN = "val_accuracy_gain"
REWARD_MEAN_LAST10 = "reward_mean_last10"
SECONDS_PER_STEP = "seconds_per_step"
STEPS = "steps"

# Evaluation (metrics/evaluate.json, per model and set).
PASS_AT_1 = "pass@1"
HELDOUT_LOSS = "heldout_loss"
HELDOUT_LOSS_INCREASE = "heldout_loss_increase"
