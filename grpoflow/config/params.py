"""The whole parameter set: every section of params/*.yaml. The shared sections are declared here
(:class:`SharedParams`); each algorithm's own section, and its space in ``tune``, come from its folder
(:mod:`grpoflow.algorithms`), added to :class:`Params` as the catalog finds them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, create_model, model_validator

from grpoflow import catalog
from grpoflow.algorithms.grpo.config import GRPOConfig
from grpoflow.algorithms.ppo.config import PPOConfig
from grpoflow.config.base import _Section
from grpoflow.config.data import DataConfig
from grpoflow.config.evaluate import EvaluateConfig
from grpoflow.config.launch import LaunchConfig
from grpoflow.config.model import ModelConfig, PromptConfig
from grpoflow.config.orchestration import AblationConfig, ExperimentConfig, OrchestrationConfig, TrackingConfig
from grpoflow.config.rewards import RewardConfig, VerifierGateConfig
from grpoflow.config.rl import RLConfig, apply_preset
from grpoflow.config.sft import RewardModelConfig, SFTConfig
from grpoflow.config.tune import SharedTuneConfig
from verifiers.limits import Limits

if TYPE_CHECKING:  # the built-in algorithms' settings, as type checkers see them (the schema adds every folder's)
    from grpoflow.algorithms.grpo.config import GRPOConfig
    from grpoflow.algorithms.ppo.config import PPOConfig


class SharedParams(_Section):
    """A whole parameter set: every section of params/*.yaml (each algorithm's own added by :class:`Params`)."""

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
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig, description="The evaluate stage.")
    ablation: AblationConfig = Field(default_factory=AblationConfig, description="The ablation flow's arms and seeds.")
    tune: SharedTuneConfig = Field(
        default_factory=SharedTuneConfig, description="make tune: each arm's search space, trials and step budget."
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
    def _rules(self) -> SharedParams:
        """The cross-field rules (:mod:`grpoflow.config.rules`), for every algorithm the set trains and every
        ablation arm: found when the file is loaded, before any stage runs."""
        from grpoflow.config import rules  # it imports this module

        try:
            rules.check(self)
        except rules.RulesBroken as exc:  # one error line per broken rule, each cut short alone
            raise ValidationError.from_exception_data("Params", exc.line_errors()) from None
        return self

    if TYPE_CHECKING:
        grpo: GRPOConfig
        ppo: PPOConfig


def _with_algorithms(shared: type[_Section], kind: str, field: str, describe: str, **more: Any) -> Any:
    """``shared`` (with the ``more`` fields) and a field per algorithm that has settings: its ``field``
    (``SECTION`` or ``SPACE``) under its name, described as ``describe`` says of its title and name."""
    fields: dict[str, Any] = dict(more)
    for name in catalog.names():
        model = getattr(catalog.settings(name), field, None)
        if model is not None:
            text = describe.format(title=catalog.title(name), name=name)
            fields[name] = (model, Field(default_factory=model, description=text))
    return create_model(kind, __base__=shared, __module__=__name__, __doc__=shared.__doc__, **fields)


# Built once, from the catalog as it is at import (GRPOFLOW_ALGORITHMS included).
if TYPE_CHECKING:
    TuneConfig = SharedTuneConfig
    Params = SharedParams
else:
    TuneConfig = _with_algorithms(
        SharedTuneConfig, "TuneConfig", "SPACE", "The space of arms whose algorithm is {name}."
    )
    Params = _with_algorithms(
        SharedParams,
        "Params",
        "SECTION",
        "{title}'s own settings (its folder's config, grpoflow.algorithms).",
        tune=(TuneConfig, Field(default_factory=TuneConfig, description=SharedParams.model_fields["tune"].description)),
    )


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
