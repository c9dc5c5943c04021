"""The SFT reference stage and the reward_model stage."""

from __future__ import annotations

from pydantic import Field

from grpoflow.config.base import _Section
from grpoflow.config.rl import EngineConfig


class SFTConfig(_Section):
    """The SFT reference stage."""

    enabled: bool = Field(
        True, description="Train the reference; false uses model.name_or_path as the reference as is."
    )
    epochs: float = Field(2.0, gt=0, description="Passes over the train split's solutions.")
    batch_size: int = Field(32, ge=1, description="Sequences per optimizer step.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=3e-3, warmup_steps=20, micro_batch_size=32),
        description="DeepSpeed settings for SFT.",
    )
    eval_examples: int = Field(300, ge=1, description="Val prompts scored greedily for val exact-match.")


class RewardModelConfig(_Section):
    """The reward_model stage (run when rewards name rm at its output): a Bradley-Terry reward model
    (one score head on the SFT policy) trained on preference pairs."""

    self_pairs: bool = Field(
        True,
        description="Build pairs from the SFT policy's own samples of train prompts, ranked by the verifiers in "
        "rewards (besides data.pairs), so the stage runs offline.",
    )
    prompts: int = Field(512, ge=1, description="Train prompts sampled for self-built pairs.")
    samples_per_prompt: int = Field(4, ge=2, description="Samples per prompt; its best and worst form a pair.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the self-built pairs' samples.")
    gold_pairs: bool = Field(
        True, description="Also pair each sampled prompt's gold solution (chosen) with its worst-scored sample."
    )
    heldout_share: float = Field(
        0.2, gt=0, lt=1, description="Share of pairs (by prompt hash) held out for pairwise accuracy and margins."
    )
    epochs: float = Field(2.0, gt=0, description="Passes over the training pairs.")
    batch_size: int = Field(16, ge=1, description="Pairs per optimizer step.")
    engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=1e-4, micro_batch_size=16), description="DeepSpeed settings for the RM."
    )
    score_batch_size: int = Field(32, ge=1, description="Sequences per forward pass when the RM scores rollouts.")
