"""GRPO's own section, and the advantage estimators it may choose, each with its typed options.

An estimator's options are read from the flat ``grpo.advantage_*`` keys (``advantage_scale``,
``advantage_ddof``, ``advantage_eps``), so params files keep their keys; each estimator receives only
the options it reads (:meth:`GRPOConfig.estimator_options`), never the whole section."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field, model_validator

from grpoflow.config.base import _Section, unknown_name


class NoAdvantageOptions(_Section):
    """An estimator without options: it ignores every ``grpo.advantage_*`` knob."""


class BatchNormOptions(_Section):
    """Options of an estimator that divides by a standard deviation."""

    ddof: int = Field(0, ge=0, le=1, description="0: population std, 1: Bessel (grpo.advantage_ddof).")
    eps: float = Field(1e-4, gt=0, description="Added to the std before dividing (grpo.advantage_eps).")


class GroupNormOptions(BatchNormOptions):
    """Options of GRPO's group-relative estimator: which std scales the centred rewards."""

    scale: Literal["group", "batch", "none"] = Field("group", description="grpo.advantage_scale.")


# Each estimator grpoflow.rl.advantages registers, by name, with its typed options: here so that loading
# a params file checks the name without importing the maths (grpoflow.rl.advantages refuses a name not
# listed). A new estimator is its function there and one line here.
ADVANTAGE_ESTIMATORS: dict[str, type[BaseModel]] = {
    "grpo": GroupNormOptions,
    "dr_grpo": NoAdvantageOptions,
    "rloo": NoAdvantageOptions,
    "reinforce_pp": BatchNormOptions,
}
# Estimators of KL(policy || reference) per token, by name (Schulman 2020): the torch-free table
# grpoflow.rl.losses.KL_ESTIMATORS registers each against.
KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATOR_NAMES = dict.fromkeys(get_args(KLEstimator))
# The flat key of this section each option field is read from.
ADVANTAGE_KEYS = {"scale": "advantage_scale", "ddof": "advantage_ddof", "eps": "advantage_eps"}


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

    def estimator_options(self, name: str | None = None) -> BaseModel:
        """Estimator ``name``'s typed options (default: the chosen estimator's), read from the flat
        ``advantage_*`` keys it uses."""
        options = ADVANTAGE_ESTIMATORS[name or self.advantage_estimator]
        return options(**{f: getattr(self, ADVANTAGE_KEYS[f]) for f in options.model_fields})


# -- GRPO's own cross-field rules (grpoflow.config.rules runs them for a set that trains GRPO) -----


def kl_in_the_reward_has_a_coefficient(params) -> list[str]:
    """``grpo.kl_placement: reward`` folds the KL penalty into the rewards; with ``grpo.beta`` 0 there
    is no penalty to fold (and no reference is loaded)."""
    if params.grpo.kl_placement == "reward" and params.grpo.beta == 0:
        return ["grpo.kl_placement: reward folds the KL penalty into the rewards, but grpo.beta is 0: there is none"]
    return []


RULES = (kl_in_the_reward_has_a_coefficient,)
