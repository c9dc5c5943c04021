"""The toy algorithm's settings: its ``reinforce_kl`` section, the space ``make tune`` searches
(``tune.reinforce_kl``) and its own rule. Torch-free, like every algorithm's."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from grpoflow.config.base import _Section
from grpoflow.config.tune import Dim, Space, dim


class ReinforceKLConfig(_Section):
    """REINFORCE-KL's own settings."""

    kl_coef: float = Field(0.05, ge=0, description="Weight of the k3 KL penalty toward the reference in the loss.")
    baseline: Literal["batch_mean", "none"] = Field(
        "batch_mean", description="What each reward is measured against: the step's mean reward, or nothing."
    )


class ReinforceKLSpace(Space):
    """What an arm of REINFORCE-KL searches: its KL weight."""

    KEYS: ClassVar[dict[str, str]] = {"kl_coef": "reinforce_kl.kl_coef"}

    kl_coef: Dim | None = Field(default_factory=lambda: dim(1e-3, 0.2, log=True), description="reinforce_kl.kl_coef.")


def no_baseline_needs_a_penalty(params) -> list[str]:
    """Without a baseline every advantage is a raw reward; with no KL weight nothing holds the policy back."""
    own = params.reinforce_kl
    if own.baseline == "none" and own.kl_coef == 0:
        return ["reinforce_kl.baseline: none with reinforce_kl.kl_coef 0 leaves the policy unanchored"]
    return []


SECTION = ReinforceKLConfig
SPACE = ReinforceKLSpace
RULES = (no_baseline_needs_a_penalty,)
