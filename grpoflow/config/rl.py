"""What every RL algorithm shares (the ``rl`` section), the DeepSpeed engine settings, the batch
arithmetic and the named recipes (presets) that set ``rl`` keys."""

from __future__ import annotations

import copy
from typing import Any, Literal, get_args

from pydantic import Field

from grpoflow.config.base import _Section, has_dotted, set_dotted

# The token aggregations of the policy loss, by name: the torch-free table grpoflow.rl.losses.AGGREGATIONS
# registers each against (see grpoflow.rl.losses for what each is).
Aggregation = Literal["grpo", "bnpo", "dr_grpo"]
AGGREGATIONS = dict.fromkeys(get_args(Aggregation))
# Estimators of KL(policy || reference) per token, by name (Schulman 2020): the torch-free table
# grpoflow.rl.losses.KL_ESTIMATORS registers each against.
KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATOR_NAMES = dict.fromkeys(get_args(KLEstimator))


class EngineConfig(_Section):
    """One DeepSpeed engine: ZeRO stage, batch, clipping, AdamW, precision."""

    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (0-3).")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward/backward on one process.")
    max_tokens_per_micro_batch: int | None = Field(
        None,
        ge=1,
        description="Token positions one forward/backward may compute on one process (packed groups or padded "
        "rows); micro-batches then vary in sequences, up to micro_batch_size. null: micro_batch_size each. "
        "Read from rl.engine.",
    )
    gradient_clipping: float = Field(1.0, ge=0, description="Max global gradient norm (0: off).")
    lr: float = Field(1e-3, gt=0, description="Peak learning rate of AdamW.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up optimizer steps, then constant.")
    bf16: Literal["auto", True, False] = Field(
        "auto",
        description="bfloat16 training: auto = on CUDA with bf16 support only; on a CPU, true is faster only "
        "with AMX (benchmarks/bench_bf16.py), and the engine warns where bf16 is emulated.",
    )
    shared_prefix: bool = Field(
        True,
        description="RL training passes encode each group's prompt once for its G completions (same results; "
        "false: a prompt-and-completion row per sample, only to compare); read from rl.engine.",
    )


class SamplingConfig(_Section):
    """How rollouts sample completions."""

    temperature: float = Field(1.0, ge=0, description="Sampling temperature for rollouts (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    max_completion_length: int = Field(24, ge=1, description="Most tokens generated per completion.")


class AdaptiveKLConfig(_Section):
    """Adaptive control of the running algorithm's KL coefficient (grpo.beta or ppo.kl_coef)."""

    enabled: bool = Field(
        False, description="Adapt the KL coefficient toward target_kl (Ziegler et al. 2019 controller)."
    )
    target_kl: float = Field(0.02, gt=0, description="KL per token the controller steers toward.")
    horizon: int = Field(50, ge=1, description="Steps over which the coefficient may change by about e-fold.")


class GenerationScheduleStep(_Section):
    """One entry of an annealed G schedule."""

    from_step: int = Field(..., ge=0, description="First optimizer step this G applies to.")
    num_generations: int = Field(..., ge=2, description="G from that step on.")


class PreflightConfig(_Section):
    """The check before the first RL step: does the starting policy give any learning signal?"""

    prompts: int = Field(16, ge=0, description="Train prompts sampled G times each before step 1 (0: no preflight).")
    min_signal: float = Field(
        0.25, ge=0, le=1, description="Share of groups with unequal rewards below which the verdict is 'weak'."
    )
    stop_on_none: bool = Field(
        True, description="Stop the stage (exit 3) when no group has unequal rewards: every advantage would be 0."
    )


class RolloutCorrectionConfig(_Section):
    """The rollout/trainer mismatch correction: the sampler's log-probs (vLLM in bf16, say) differ
    from the trainer's, so the rollouts are slightly off-policy. With rho = p_trainer / p_sampler per
    token (or its product over a sequence), truncated importance sampling (TIS, Yao et al. 2025)
    weights the policy loss by min(rho, cap); masked importance sampling (MIS) drops tokens (or
    sequences) whose rho lies outside [1/cap, cap]. The mismatch is logged whenever the engine
    reports its log-probs."""

    mode: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = Field(
        "none", description="TIS (truncate) or MIS (mask), per token or per sequence; none: no correction."
    )
    cap: float = Field(2.0, gt=1, description="The ratio cap C: TIS weights min(rho, C), MIS keeps [1/C, C].")


class DynamicSamplingConfig(_Section):
    """DAPO's dynamic sampling (Yu et al. 2025, section 3.2): groups whose rewards are all equal
    carry no advantage, so they are dropped and more prompts are drawn to fill the step."""

    enabled: bool = Field(False, description="Drop groups of equal rewards and draw more prompts (DAPO).")
    max_draws: int = Field(
        3,
        ge=1,
        description="Extra draws of prompts_per_step prompts at most; the step is then filled with dropped groups.",
    )


class RLConfig(_Section):
    """What every RL algorithm shares, so that GRPO and the PPO baseline compare on one budget:
    prompts, samples per prompt, sampling, the rollout and policy engines, mu, the clip range, steps."""

    steps: int = Field(150, ge=1, description="Optimizer steps (one batch of prompts each).")
    prompts_per_step: int = Field(8, ge=1, description="Prompts per step, across all processes.")
    num_generations: int = Field(8, ge=2, description="G, completions sampled per prompt.")
    generation_schedule: list[GenerationScheduleStep] = Field(
        default_factory=list,
        description="Anneal G: entries (from_step, num_generations), e.g. large early, smaller later.",
    )
    num_iterations: int = Field(
        1, ge=1, description="mu, updates per batch; old log-probs are taken once before the first."
    )
    clip_eps: float = Field(0.2, gt=0, description="Lower (and default upper) clip range of the ratio.")
    clip_eps_high: float | None = Field(None, gt=0, description="Upper clip range (DAPO clip-higher); null = clip_eps.")
    aggregation: Aggregation = Field("grpo", description="Token aggregation of the policy loss.")
    mask_truncated_completions: bool = Field(
        False, description="Exclude completions that hit the length cap from the loss."
    )
    entropy_coef: float = Field(
        0.0, ge=0, description="Weight of an entropy bonus subtracted from the policy loss (0: none, as in the paper)."
    )
    preset: Literal["none", "dapo"] = Field(
        "none", description="A named recipe (PRESETS) that sets its keys, except those this file sets itself."
    )
    ref_sync_every: int = Field(
        0,
        ge=0,
        description="Every N steps: reference = alpha*policy + (1-alpha)*reference (TRL sync_ref_model; 0: off).",
    )
    ref_sync_alpha: float = Field(0.6, gt=0, le=1, description="The policy's share in a reference refresh (TRL: 0.6).")
    rollout_correction: RolloutCorrectionConfig = Field(
        default_factory=RolloutCorrectionConfig, description="Importance correction of the rollout/trainer mismatch."
    )
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig, description="DAPO's dynamic sampling of informative groups."
    )
    overlong_buffer: int = Field(
        0, ge=0, description="DAPO's soft overlong punishment: tokens before the length cap where it starts (0: off)."
    )
    overlong_penalty: float = Field(
        1.0, ge=0, description="Penalty reached at the length cap, growing linearly across the buffer (DAPO: 1)."
    )
    adaptive_kl: AdaptiveKLConfig = Field(default_factory=AdaptiveKLConfig, description="Adaptive KL control.")
    rollout_engine: Literal["hf", "vllm"] = Field("hf", description="Rollouts with transformers generate or vLLM.")
    decode: Literal["auto", "static", "dynamic"] = Field(
        "auto",
        description="The transformers engine's decode loop: a static KV cache (each step a CUDA graph replay on "
        "CUDA), the growing cache, or auto: static on an accelerator, growing on CPU (a failed capture falls back).",
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Rollout sampling.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=2e-4, micro_batch_size=64),
        description="DeepSpeed settings for the policy.",
    )
    checkpoint_every: int = Field(25, ge=1, description="Save a resumable checkpoint every N steps.")
    keep_checkpoints: int = Field(
        2, ge=1, description="Checkpoints kept; older ones are deleted (a corrupt newest falls back to the one before)."
    )
    oom_backoff: bool = Field(
        True,
        description="On out-of-memory: halve G (to 2), then max_completion_length, then the micro-batch, and go on.",
    )
    oom_min_completion_length: int = Field(
        16, ge=1, description="Back-off never shortens completions below this many tokens."
    )
    eval_every: int = Field(50, ge=1, description="Greedy val accuracy every N steps.")
    preflight: PreflightConfig = Field(default_factory=PreflightConfig, description="The check before step 1.")

    def generations_at(self, step: int) -> int:
        """G at optimizer step ``step`` under the schedule."""
        g = self.num_generations
        for entry in sorted(self.generation_schedule, key=lambda e: e.from_step):
            if step >= entry.from_step:
                g = entry.num_generations
        return g

    def generation_sizes(self) -> list[int]:
        """Every G the schedule can use, smallest first."""
        return sorted({self.num_generations, *(e.num_generations for e in self.generation_schedule)})


def batch_problems(rl: RLConfig, world_size: int) -> list[str]:
    """Why the batch arithmetic cannot work on ``world_size`` processes (empty when it can).

    Checked at load for one process (a set that splits over W processes also fits one), and by
    the training stage for the real world size."""
    problems = []
    if rl.prompts_per_step % world_size:
        problems.append(f"rl.prompts_per_step={rl.prompts_per_step} is not divisible by {world_size} processes")
        return problems
    micro = rl.engine.micro_batch_size
    for g in rl.generation_sizes():
        per_rank = rl.prompts_per_step // world_size * g
        if per_rank % min(micro, per_rank):
            problems.append(
                f"{per_rank} sequences per process (rl.prompts_per_step / {world_size} processes x G={g}) are not a "
                f"multiple of rl.engine.micro_batch_size={micro}"
            )
    return problems


# Named recipes: the keys each sets, unless the params file sets them itself. A value of the form
# "cap/N" is the completion cap (rl.sampling.max_completion_length) divided by N.
PRESETS: dict[str, dict[str, Any]] = {
    # DAPO (Yu et al. 2025): clip-higher (eps 0.2 low, 0.28 high), the token-level loss, dynamic
    # sampling, the soft overlong punishment (its buffer was 4k of a 20k cap: a fifth), no KL term.
    "dapo": {
        "rl.clip_eps": 0.2,
        "rl.clip_eps_high": 0.28,
        "rl.aggregation": "bnpo",
        "rl.dynamic_sampling.enabled": True,
        "rl.overlong_buffer": "cap/5",
        "grpo.beta": 0.0,
    },
}


def preset_values(name: str, cap: int) -> dict[str, Any]:
    """Preset ``name``'s keys and values for a completion cap of ``cap`` tokens."""
    return {
        key: max(1, cap // int(value[4:])) if str(value).startswith("cap/") else value
        for key, value in PRESETS[name].items()
    }


def apply_preset(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the keys of its ``rl.preset`` filled in where it does not set them itself."""
    name = (raw.get("rl") or {}).get("preset", "none") if isinstance(raw.get("rl"), dict) else "none"
    if name not in PRESETS:
        return raw  # "none", or a bad name the schema then reports
    out = copy.deepcopy(raw)
    cap = (out["rl"].get("sampling") or {}).get("max_completion_length", SamplingConfig().max_completion_length)
    for key, value in preset_values(name, cap).items():
        if not has_dotted(out, key):
            set_dotted(out, key, value)
    return out
