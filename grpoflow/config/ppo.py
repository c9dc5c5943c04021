"""The PPO baseline's own section, and the critic-based advantage estimators with their typed options
(GAE, read from the flat ``ppo.gamma`` and ``ppo.lam`` keys)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from grpoflow.config.base import _Section
from grpoflow.config.rl import EngineConfig


class GaeOptions(_Section):
    """Options of generalised advantage estimation (Schulman et al. 2016)."""

    gamma: float = Field(1.0, gt=0, le=1, description="Discount (ppo.gamma).")
    lam: float = Field(0.95, ge=0, le=1, description="Lambda (ppo.lam).")


# Each critic-based estimator grpoflow.rl.advantages registers, by name, with its typed options (see
# ADVANTAGE_ESTIMATORS for the critic-free ones GRPO chooses from).
CRITIC_ESTIMATORS: dict[str, type[BaseModel]] = {"gae": GaeOptions}


class PPOConfig(_Section):
    """The PPO baseline's own settings (critic, GAE, its KL penalty); its budget is the ``rl`` section's."""

    gamma: float = Field(1.0, gt=0, le=1, description="Discount of GAE (1: none, as usual for one reward at the end).")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    kl_coef: float = Field(
        0.04, ge=0, description="Per-token KL penalty folded into the reward, InstructGPT-style (0: no reference)."
    )
    cliprange_value: float = Field(0.2, gt=0, description="Clip range of the value update around the old values.")
    whiten_advantages: bool = Field(True, description="Normalise GAE advantages over the batch's tokens.")
    critic_engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=1e-3, micro_batch_size=64),
        description="DeepSpeed settings for the critic.",
    )

    def estimator_options(self, name: str = "gae") -> BaseModel:
        """Critic-based estimator ``name``'s typed options, read from this section's keys of the same names."""
        options = CRITIC_ESTIMATORS[name]
        return options(**{f: getattr(self, f) for f in options.model_fields})
