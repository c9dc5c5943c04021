"""GRPO's own section, and the advantage estimators it may choose, each with its typed options.

An estimator's options are the flat ``grpo.advantage_*`` keys (``advantage_scale``,
``advantage_ddof``, ``advantage_eps``), declared once as :class:`GRPOConfig`'s fields, so params files
keep their keys; each estimator receives only the options it reads (:meth:`GRPOConfig.estimator_options`),
typed as those fields are and named without the ``advantage_`` prefix, never the whole section."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from grpoflow.config.base import SectionOptions, _Section, options_of, unknown_name
from grpoflow.config.rl import KLEstimator
from grpoflow.config.tune import Dim, Space, dim

# The prefix of this section's keys an estimator's options are read from ("advantage_scale" is its "scale").
ADVANTAGE_PREFIX = "advantage_"


class GRPOConfig(_Section):
    """GRPO's own settings (DeepSeekMath, Shao et al. 2024): its KL penalty and its advantages."""

    beta: float = Field(0.04, ge=0, description="KL penalty weight toward the reference (0: no reference is loaded).")
    ratio_level: Literal["token", "sequence"] = Field(
        "token", description="Importance ratio per token or per sequence."
    )
    kl_estimator: KLEstimator = Field(
        "k3", description="Estimator of KL(policy || reference) per token (Schulman 2020); k3 as in the paper."
    )
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="KL penalty as a loss term (the paper) or subtracted from each reward (PPO-style)."
    )
    advantage_estimator: str = Field(
        "grpo", description="Advantage estimator (grpoflow.rl.advantages.ESTIMATORS), e.g. grpo."
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

    def estimator_options(self, name: str | None = None) -> SectionOptions:
        """Estimator ``name``'s typed options (default: the chosen estimator's), read from the flat
        ``advantage_*`` keys it uses."""
        return ADVANTAGE_ESTIMATORS[name or self.advantage_estimator].read(self)


# -- Each estimator's typed options: fields of GRPOConfig above (options_of), not declared again ----


class NoAdvantageOptions(SectionOptions):
    """An estimator without options: it ignores every ``grpo.advantage_*`` knob."""


class BatchNormOptions(options_of(GRPOConfig, "advantage_ddof", "advantage_eps", prefix=ADVANTAGE_PREFIX)):  # type: ignore[misc]
    """Options of an estimator that divides by a standard deviation (``grpo.advantage_ddof``,
    ``grpo.advantage_eps``)."""


class GroupNormOptions(options_of(GRPOConfig, "advantage_scale", prefix=ADVANTAGE_PREFIX, base=BatchNormOptions)):  # type: ignore[misc]
    """Options of GRPO's group-relative estimator: which std scales the centred rewards
    (``grpo.advantage_scale``), besides :class:`BatchNormOptions`'."""


# Each estimator grpoflow.rl.advantages registers, by name, with its typed options: here so that loading
# a params file checks the name without importing the maths (grpoflow.rl.advantages refuses a name not
# listed). A new estimator is its function there and one line here (and a field above for a new option).
ADVANTAGE_ESTIMATORS: dict[str, type[SectionOptions]] = {
    "grpo": GroupNormOptions,
    "dr_grpo": NoAdvantageOptions,
    "rloo": NoAdvantageOptions,
    "reinforce_pp": BatchNormOptions,
}


# -- GRPO's own cross-field rules (grpoflow.config.rules runs them for a set that trains GRPO) -----


def kl_in_the_reward_has_a_coefficient(params) -> list[str]:
    """``grpo.kl_placement: reward`` folds the KL penalty into the rewards; with ``grpo.beta`` 0 there
    is no penalty to fold (and no reference is loaded)."""
    if params.grpo.kl_placement == "reward" and params.grpo.beta == 0:
        return ["grpo.kl_placement: reward folds the KL penalty into the rewards, but grpo.beta is 0: there is none"]
    return []


RULES = (kl_in_the_reward_has_a_coefficient,)


# -- What make tune searches for an arm of this algorithm (tune.<name>) ----------------------------


class GRPOSpace(Space):
    """What a GRPO-family arm searches (grpo, dr_grpo, rloo, reinforce_pp, dapo, custom GRPO arms)."""

    KEYS: ClassVar[dict[str, str]] = {
        "lr": "rl.engine.lr",
        "beta": "grpo.beta",
        "num_generations": "rl.num_generations",
        "temperature": "rl.sampling.temperature",
    }

    lr: Dim | None = Field(default_factory=lambda: dim(5e-5, 1e-3, log=True), description="rl.engine.lr.")
    beta: Dim | None = Field(default_factory=lambda: dim(1e-3, 0.2, log=True), description="grpo.beta (KL weight).")
    num_generations: Dim | None = Field(
        default_factory=lambda: Dim(choices=[4, 8, 16]), description="rl.num_generations (G; it sets a step's cost)."
    )
    temperature: Dim | None = Field(default_factory=lambda: dim(0.6, 1.2), description="rl.sampling.temperature.")


# What the schema reads of this folder (grpoflow.catalog.settings): the params section named after the
# algorithm, its space in tune, and its cross-field rules (RULES, above).
SECTION = GRPOConfig
SPACE = GRPOSpace
