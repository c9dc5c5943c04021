"""The whole parameter set: every section of params/*.yaml."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from grpoflow.config.base import _Section
from grpoflow.config.data import DataConfig
from grpoflow.config.evaluate import EvaluateConfig
from grpoflow.config.grpo import GRPOConfig
from grpoflow.config.launch import LaunchConfig
from grpoflow.config.model import ModelConfig, PromptConfig
from grpoflow.config.orchestration import AblationConfig, ExperimentConfig, OrchestrationConfig, TrackingConfig
from grpoflow.config.ppo import PPOConfig
from grpoflow.config.rewards import RewardConfig, VerifierGateConfig
from grpoflow.config.rl import RLConfig, apply_preset
from grpoflow.config.sft import RewardModelConfig, SFTConfig
from grpoflow.config.tune import TuneConfig
from verifiers.limits import Limits


class Params(_Section):
    """A whole parameter set: every section of params/*.yaml."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, raw: Any) -> Any:
        return apply_preset(raw) if isinstance(raw, dict) else raw

    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig, description="Identity and seed of the run.")
    data: DataConfig = Field(default_factory=DataConfig, description="The prepare stage.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="How questions are put to the model.")
    rewards: list[RewardConfig] = Field(
        default_factory=lambda: [RewardConfig(name="math", weight=1.0), RewardConfig(name="format", weight=0.1)],
        min_length=1,
        description="Verifiers whose weighted sum is the reward.",
    )
    sandbox: Limits = Field(
        default_factory=Limits,
        description="The sandbox that runs completions' code (code reward): limits, parallelism.",
    )
    verifier_gate: VerifierGateConfig = Field(
        default_factory=VerifierGateConfig, description="The validate_verifiers gate."
    )
    sft: SFTConfig = Field(default_factory=SFTConfig, description="The SFT reference stage.")
    reward_model: RewardModelConfig = Field(
        default_factory=RewardModelConfig, description="The reward_model stage (when rewards name rm)."
    )
    rl: RLConfig = Field(
        default_factory=RLConfig, description="The budget every RL stage shares (GRPO and the PPO baseline)."
    )
    grpo: GRPOConfig = Field(default_factory=GRPOConfig, description="The GRPO stage's own settings.")
    ppo: PPOConfig = Field(default_factory=PPOConfig, description="The PPO baseline stage's own settings.")
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="The evaluate stage.")
    ablation: AblationConfig = Field(default_factory=AblationConfig, description="The ablation flow's arms and seeds.")
    tune: TuneConfig = Field(
        default_factory=TuneConfig, description="make tune: each arm's search space, trials and step budget."
    )
    launch: LaunchConfig = Field(
        default_factory=LaunchConfig, description="Processes per distributed stage: torchrun's options (1: none)."
    )
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking.")
    orchestration: OrchestrationConfig = Field(
        default_factory=OrchestrationConfig, description="Prefect runs: pool, GPU limit, retries, DVC experiments."
    )

    @property
    def mlflow_experiment(self) -> str:
        """The MLflow experiment of this parameter set."""
        return self.tracking.experiment or f"grpoflow-{self.experiment.name}"

    @model_validator(mode="after")
    def _rules(self) -> Params:
        """The cross-field rules (:mod:`grpoflow.config.rules`), for every algorithm the set trains and every
        ablation arm: found when the file is loaded, before any stage runs."""
        from grpoflow.config import rules  # it imports this module

        try:
            rules.check(self)
        except rules.RulesBroken as exc:  # one error line per broken rule, each cut short alone
            raise ValidationError.from_exception_data("Params", exc.line_errors()) from None
        return self


def describe_schema(model: type[BaseModel] = Params, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, description)`` for every field a set spells by a dotted key (the
    sections of lists and mappings are not descended into): the keys of stage params and overrides."""
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(describe_schema(ann, prefix=f"{key}."))
        else:
            rows.append((key, repr(field.get_default(call_default_factory=True)), field.description or ""))
    return rows
