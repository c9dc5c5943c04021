"""The PPO baseline's own section, and the critic-based advantage estimators with their typed options
(GAE's: the flat ``ppo.gamma``, ``ppo.lam``, ``ppo.lam_actor`` and ``ppo.lam_critic`` keys, declared once
as :class:`PPOConfig`'s fields)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from grpoflow.config.base import SectionOptions, _Section, options_of
from grpoflow.config.rewards import RM_REWARD
from grpoflow.config.rl import EngineConfig
from grpoflow.config.tune import Dim, Space, dim

_LAM = (
    "GAE lambda of the policy's advantages and of the critic's targets, unless ppo.lam_actor / ppo.lam_critic "
    "set one apart."
)
_LAM_ACTOR = "GAE lambda of the policy's advantages (decoupled GAE, VAPO); null: ppo.lam."
_LAM_CRITIC = (
    "GAE lambda of the critic's regression targets (decoupled GAE); 1.0 (VAPO, Open-Reasoner-Zero): Monte Carlo "
    "returns, not biased by the critic's own values; null: ppo.lam."
)


class PPOConfig(_Section):
    """The PPO baseline's own settings (critic, GAE, its KL penalty); its budget is the ``rl`` section's."""

    gamma: float = Field(1.0, gt=0, le=1, description="Discount of GAE (1: none, as usual for one reward at the end).")
    lam: float = Field(0.95, ge=0, le=1, description=_LAM)
    lam_actor: float | None = Field(None, ge=0, le=1, description=_LAM_ACTOR)
    lam_critic: float | None = Field(None, ge=0, le=1, description=_LAM_CRITIC)
    kl_coef: float = Field(
        0.04, ge=0, description="Per-token KL penalty folded into the reward, InstructGPT-style (0: no reference)."
    )
    actor_lr: float | None = Field(
        None, gt=0, description="The policy's learning rate under PPO (null: rl.engine.lr, the one GRPO trains with)."
    )
    cliprange_value: float = Field(0.2, gt=0, description="Clip range of the value update around the old values.")
    whiten_advantages: bool = Field(True, description="Normalise GAE advantages over the batch's tokens.")
    critic_warmup_steps: int = Field(
        0,
        ge=0,
        description="The first N of rl.steps fit the critic alone on the frozen policy's rollouts (VAPO's value "
        "pretraining): the policy and its optimizer are untouched, and rl.steps - N steps update it. 0: none.",
    )
    critic_epochs: int = Field(
        1,
        ge=1,
        description="Passes of the critic over each batch per policy pass: 1 steps it with the policy; each more "
        "fits it again on the same targets after the policy's update (a critic learns slower than its policy).",
    )
    critic_init: Literal["policy", "reward_model"] = Field(
        "policy",
        description="Where the critic starts: policy (the SFT model's trunk, a zero value head) or reward_model "
        "(the trunk and score head of the reward model that rewards names as rm; InstructGPT).",
    )
    critic_engine: EngineConfig = Field(
        default_factory=lambda: EngineConfig(lr=1e-3, micro_batch_size=64),
        description="DeepSpeed settings for the critic.",
    )

    def estimator_options(self, name: str = "gae") -> SectionOptions:
        """Critic-based estimator ``name``'s typed options, read from this section's keys of the same names."""
        return CRITIC_ESTIMATORS[name].read(self)


class GaeOptions(options_of(PPOConfig, "gamma", "lam", "lam_actor", "lam_critic")):  # type: ignore[misc]
    """Options of generalised advantage estimation (Schulman et al. 2016), its lambda decoupled as in
    VAPO (Yue et al. 2025): one for the policy's advantages, one for the critic's targets. Each is the
    PPOConfig field of its name (options_of): ppo.gamma, ppo.lam, ppo.lam_actor, ppo.lam_critic."""

    @property
    def actor_lam(self) -> float:
        """The lambda of the policy's advantages: ``lam_actor``, else the shared ``lam``."""
        return self.lam if self.lam_actor is None else self.lam_actor

    @property
    def critic_lam(self) -> float:
        """The lambda of the critic's targets: ``lam_critic``, else the shared ``lam``."""
        return self.lam if self.lam_critic is None else self.lam_critic


# Each critic-based estimator grpoflow.rl.advantages registers, by name, with its typed options (see
# ADVANTAGE_ESTIMATORS for the critic-free ones GRPO chooses from).
CRITIC_ESTIMATORS: dict[str, type[SectionOptions]] = {"gae": GaeOptions}


# -- PPO's own cross-field rules (grpoflow.config.rules runs them for a set that trains PPO) ------


def critic_warmup_leaves_policy_steps(params) -> list[str]:
    """``ppo.critic_warmup_steps`` count against ``rl.steps`` (their rollouts are sampled like any
    step's, so every algorithm gets the same rollout budget): at least one step must update the policy."""
    warmup, steps = params.ppo.critic_warmup_steps, params.rl.steps
    if warmup >= steps:
        return [
            f"ppo.critic_warmup_steps={warmup} leaves none of rl.steps={steps} to update the policy (the warm-up "
            f"counts against rl.steps): lower it (--set ppo.critic_warmup_steps={steps // 4}) or raise "
            "rl.steps; --smoke sizes both"
        ]
    return []


def critic_from_a_reward_model_has_one(params) -> list[str]:
    """``ppo.critic_init: reward_model`` starts PPO's critic from the reward model ``rewards`` names (name: rm)."""
    if params.ppo.critic_init == "reward_model" and all(r.name != RM_REWARD for r in params.rewards):
        return [
            "ppo.critic_init: reward_model starts the critic from the reward model in rewards (name: rm), but "
            "rewards has none: add one (the reward_model stage trains it), or use ppo.critic_init: policy"
        ]
    return []


RULES = (critic_warmup_leaves_policy_steps, critic_from_a_reward_model_has_one)


# -- What make tune searches for an arm of this algorithm (tune.<name>) ----------------------------


class PPOSpace(Space):
    """What a PPO arm searches: its actor and critic learning rates, the decoupled lambdas, the value
    clip, the critic's warm-up and the KL weight."""

    KEYS: ClassVar[dict[str, str]] = {
        "lr": "ppo.actor_lr",
        "critic_lr": "ppo.critic_engine.lr",
        "lam_actor": "ppo.lam_actor",
        "lam_critic": "ppo.lam_critic",
        "cliprange_value": "ppo.cliprange_value",
        "critic_warmup_steps": "ppo.critic_warmup_steps",
        "kl_coef": "ppo.kl_coef",
    }

    lr: Dim | None = Field(default_factory=lambda: dim(5e-5, 1e-3, log=True), description="ppo.actor_lr.")
    critic_lr: Dim | None = Field(
        default_factory=lambda: dim(1e-4, 3e-3, log=True), description="ppo.critic_engine.lr."
    )
    lam_actor: Dim | None = Field(default_factory=lambda: dim(0.9, 1.0), description="ppo.lam_actor.")
    lam_critic: Dim | None = Field(default_factory=lambda: dim(0.9, 1.0), description="ppo.lam_critic.")
    cliprange_value: Dim | None = Field(default_factory=lambda: dim(0.1, 0.5), description="ppo.cliprange_value.")
    critic_warmup_steps: Dim | None = Field(
        default_factory=lambda: dim(0, 30), description="ppo.critic_warmup_steps (below the trial's steps)."
    )
    kl_coef: Dim | None = Field(default_factory=lambda: dim(1e-3, 0.2, log=True), description="ppo.kl_coef.")


# What the schema reads of this folder (grpoflow.catalog.settings): the params section named after the
# algorithm, its space in tune, and its cross-field rules (RULES, above).
SECTION = PPOConfig
SPACE = PPOSpace
