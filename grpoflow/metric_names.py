"""The names of training metrics, spelt once: the trainers write them, the health rules, the
history CSV, MLflow, the flow and the comparison read them."""

from __future__ import annotations

# Per step, from the shared loop (grpoflow.rl.trainer) and the algorithms' updates.
STEP = "step"
REWARD_MEAN = "reward_mean"
REWARD_STD = "reward_std"
GROUP_REWARD_STD = "group_reward_std"
FRAC_ZERO_STD_GROUPS = "frac_zero_std_groups"
DYNAMIC_SAMPLING_DRAWS = "dynamic_sampling_draws"  # extra prompt draws of DAPO's dynamic sampling
FRAC_DROPPED_GROUPS = "frac_dropped_groups"  # share of sampled groups it left out of the step
REWARD_PREFIX = "reward/"  # + verifier name: each component of the reward
KL = "kl"
KL_COEF = "kl_coef"
LOSS = "loss"
SFT_LOSS = "sft_loss"  # SFT's cross-entropy: its own curve, not the RL stages' policy loss
CLIP_RATIO = "clip_ratio"
ENTROPY = "entropy"
GRAD_NORM = "grad_norm"
COMPLETION_LENGTH_MEAN = "completion_length_mean"
COMPLETION_LENGTH_MAX = "completion_length_max"
FRAC_TRUNCATED = "frac_truncated"
ROLLOUT_LOGP_DIFF = "rollout_logp_diff"  # mean |trainer - sampler| log-prob of the sampled tokens
ROLLOUT_RATIO_MAX = "rollout_ratio_max"  # the largest trainer/sampler token probability ratio
ROLLOUT_MASKED_FRAC = "rollout_masked_frac"  # share of tokens an MIS correction left out
ROLLOUT_TOKENS_PER_S = "rollout_tokens_per_s"
UPDATE_TOKENS_PER_S = "update_tokens_per_s"
STEP_SECONDS = "step_seconds"
ROLLOUT_SECONDS = "rollout_seconds"
UPDATE_SECONDS = "update_seconds"
PEAK_MEMORY_MB = "peak_memory_mb"
MEMORY = "memory"  # a run's memory record (grpoflow.rl.memory): before training, peak, each model's state
# Where a loop iteration's wall time goes (grpoflow.rl.step_timing.PhaseTimer): exclusive seconds per phase;
# "other" is the wall minus the named ones (metrics, health, the reference refresh), so they sum to
# PHASE_WALL: the step, its evaluation and its checkpoint (STEP_SECONDS is the step alone).
PHASE_PREFIX = "phase/"
PHASE_ROLLOUT = "phase/rollout_s"
PHASE_REWARD = "phase/reward_s"
PHASE_REF_LOGPROBS = "phase/ref_logprobs_s"
# The policy's before its update: num_iterations > 1, KL in the reward, PPO.
PHASE_OLD_LOGPROBS = "phase/old_logprobs_s"
PHASE_UPDATE = "phase/update_s"  # the update's own passes, less the two log-prob phases inside it
PHASE_WEIGHT_SYNC = "phase/weight_sync_s"
PHASE_EVALUATE = "phase/evaluate_s"
PHASE_CHECKPOINT = "phase/checkpoint_s"
PHASE_OTHER = "phase/other_s"
PHASE_WALL = "phase/wall_s"
TIMED_PHASES = (
    PHASE_ROLLOUT,
    PHASE_REWARD,
    PHASE_REF_LOGPROBS,
    PHASE_OLD_LOGPROBS,
    PHASE_UPDATE,
    PHASE_WEIGHT_SYNC,
    PHASE_EVALUATE,
    PHASE_CHECKPOINT,
)
PHASES = (*TIMED_PHASES, PHASE_OTHER)  # these sum to PHASE_WALL
NUM_GENERATIONS = "num_generations"
MAX_COMPLETION_LENGTH = "max_completion_length"
MICRO_BATCH_SIZE = "micro_batch_size"
LR = "lr"
HEALTH_SYMPTOMS = "health_symptoms"  # the symptoms that stand at the end of the run (names)
HEALTH = "health"  # every symptom seen, with its final status (grpoflow.rl.health.HealthMonitor.verdict)
VAL_ACCURACY = "val_accuracy"
# PPO's critic: its loss, how much of the returns' variance its values explain (before the step's
# update), the returns' scale (its targets), and whether the step only fitted it (ppo.critic_warmup_steps).
VALUE_LOSS = "value_loss"
EXPLAINED_VARIANCE = "explained_variance"
RETURNS_MEAN = "returns_mean"
RETURNS_STD = "returns_std"
CRITIC_WARMUP = "critic_warmup"  # 1: the policy was frozen at this step, 0: it was updated

# The per-step history CSV (DVC plots), in column order.
HISTORY_FIELDS = [
    STEP,
    REWARD_MEAN,
    REWARD_STD,
    GROUP_REWARD_STD,
    FRAC_ZERO_STD_GROUPS,
    DYNAMIC_SAMPLING_DRAWS,
    FRAC_DROPPED_GROUPS,
    KL,
    KL_COEF,
    LOSS,
    CLIP_RATIO,
    ENTROPY,
    GRAD_NORM,
    COMPLETION_LENGTH_MEAN,
    COMPLETION_LENGTH_MAX,
    FRAC_TRUNCATED,
    ROLLOUT_LOGP_DIFF,
    ROLLOUT_RATIO_MAX,
    ROLLOUT_MASKED_FRAC,
    ROLLOUT_TOKENS_PER_S,
    UPDATE_TOKENS_PER_S,
    STEP_SECONDS,
    PEAK_MEMORY_MB,
    NUM_GENERATIONS,
    VAL_ACCURACY,
    VALUE_LOSS,
    EXPLAINED_VARIANCE,
    RETURNS_MEAN,
    RETURNS_STD,
    CRITIC_WARMUP,
    *PHASES,
    PHASE_WALL,
]

# A training stage's summary (metrics/<algorithm>.json).
VAL_ACCURACY_START = "val_accuracy_start"
VAL_ACCURACY_GAIN = "val_accuracy_gain"
# The one "recent" window: the summary's recent reward, the comparison's stability and the health
# check's flat-reward rule all read the last RECENT_STEPS steps, and say so in their names.
RECENT_STEPS = 20
REWARD_MEAN_RECENT = f"reward_mean_last{RECENT_STEPS}"
SECONDS_PER_STEP = "seconds_per_step"
KL_FINAL = "kl_final"
STEPS = "steps"
# A stage's numbers that describe the run rather than measure it: MLflow gets them as params.
RUN_CONSTANTS = frozenset({"world_size", "train_seed", STEPS, "examples", "k", "n_samples", "group_size", "prompts"})
PHASE_SPLIT = "phases"  # per phase: mean seconds per step and share of the mean wall


def phase_label(key: str) -> str:
    """A phase's name as the run page shows it: ``phase/ref_logprobs_s`` -> ``ref_logprobs``."""
    return key.removeprefix(PHASE_PREFIX).removesuffix("_s")


# MLflow's run page draws one section of charts per name prefix (before the first "/"), in the
# sorted order of the names: evaluation and the learning signal sort first, then cost, the
# preflight, the rollouts' shape, schedules that moved and end-of-stage summaries. Summaries get
# names of their own so that no final value lands on a curve as an extra point.
LEARNING = "learning/"
EVAL = "eval/"
PERF = "perf/"
ROLLOUT = "rollout/"
SCHEDULE = "schedule/"
SUMMARY = "summary/"
_GROUPS = {
    EVAL: (VAL_ACCURACY,),
    LEARNING: (SFT_LOSS,),
    PERF: (
        ROLLOUT_TOKENS_PER_S,
        UPDATE_TOKENS_PER_S,
        STEP_SECONDS,
        ROLLOUT_SECONDS,
        UPDATE_SECONDS,
        PEAK_MEMORY_MB,
        *PHASES,
        PHASE_WALL,
    ),
    ROLLOUT: (
        COMPLETION_LENGTH_MEAN,
        COMPLETION_LENGTH_MAX,
        FRAC_TRUNCATED,
        FRAC_ZERO_STD_GROUPS,
        GROUP_REWARD_STD,
        DYNAMIC_SAMPLING_DRAWS,
        FRAC_DROPPED_GROUPS,
        ROLLOUT_LOGP_DIFF,
        ROLLOUT_RATIO_MAX,
        ROLLOUT_MASKED_FRAC,
    ),
    SCHEDULE: (KL_COEF, NUM_GENERATIONS, MAX_COMPLETION_LENGTH, MICRO_BATCH_SIZE, LR, CRITIC_WARMUP),
}
_GROUP_OF = {key: prefix for prefix, keys in _GROUPS.items() for key in keys}
# In the history CSV only: the count of health symptoms so far (MLflow has them as a tag and a report).
_NOT_CHARTED = {HEALTH_SYMPTOMS, HEALTH}


def tracked(key: str) -> str | None:
    """The MLflow name of per-step metric ``key``: its section's prefix, then the key (None: not charted)."""
    return None if key in _NOT_CHARTED else _GROUP_OF.get(key, LEARNING) + key


def is_schedule(name: str) -> bool:
    """Whether MLflow name ``name`` is a schedule value (a param unless a schedule or back-off moves it)."""
    return name.startswith(SCHEDULE)


# Evaluation (metrics/evaluate.json, per model and set).
PASS_AT_1 = "pass@1"  # the mean over each prompt's samples at evaluate.temperature
GREEDY = "greedy"  # accuracy of greedy decoding (evaluate.greedy)
STDERR_SUFFIX = "_se"  # "pass@1_se": the standard error over prompts of the score it follows


def stderr_of(score: str) -> str:
    """The key of ``score``'s standard error ("pass@1" -> "pass@1_se")."""
    return score + STDERR_SUFFIX


def is_score(key: str) -> bool:
    """Whether a set's key is a score (pass@k, maj@k, greedy), not its standard error or a count."""
    return not key.endswith(STDERR_SUFFIX) and ("@" in key or key == GREEDY)


HELDOUT_LOSS = "heldout_loss"
HELDOUT_LOSS_INCREASE = "heldout_loss_increase"
