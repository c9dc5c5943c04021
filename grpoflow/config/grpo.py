"""GRPO's own section, and the names of the advantage estimators it may choose."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from grpoflow.config.base import _Section, unknown_name

# The names grpoflow.advantages registers its estimators under, here so that loading a params file
# checks the name without importing the maths (grpoflow.advantages refuses a name not listed).
ADVANTAGE_ESTIMATORS: tuple[str, ...] = ("grpo", "dr_grpo", "rloo", "reinforce_pp")


class GRPOConfig(_Section):
    """GRPO's own settings (DeepSeekMath, Shao et al. 2024): its KL penalty and its advantages."""

    beta: float = Field(0.04, ge=0, description="KL penalty weight toward the reference (0: no reference is loaded).")
    ratio_level: Literal["token", "sequence"] = Field(
        "token", description="Importance ratio per token or per sequence."
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Estimator of KL(policy || reference) per token (Schulman 2020); k3 as in the paper."
    )
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="KL penalty as a loss term (the paper) or subtracted from each reward (PPO-style)."
    )
    advantage_estimator: str = Field(
        "grpo", description="Advantage estimator (grpoflow.advantages.ESTIMATORS), e.g. grpo."
    )
    advantage_scale: Literal["group", "batch", "none"] = Field("group", description="Std used to scale advantages.")
    advantage_ddof: int = Field(0, ge=0, le=1, description="0: population std (the paper), 1: Bessel (TRL, verl).")
    advantage_eps: float = Field(1e-4, gt=0, description="Added to the std before dividing.")

    @model_validator(mode="after")
    def _known_estimator(self) -> GRPOConfig:
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            known = sorted(ADVANTAGE_ESTIMATORS)
            raise ValueError(unknown_name("advantage estimator", self.advantage_estimator, known))
        return self
