"""The one typed schema for ``params/*.yaml``.

Every stage reads its section of the same file; DVC tracks the same sections as stage
params. Unknown keys are errors (a misspelt key must never be silently ignored), and every
error names the file and the dotted key. One module per owner: :mod:`~grpoflow.config.data`,
:mod:`~grpoflow.config.model`, :mod:`~grpoflow.config.rewards`, :mod:`~grpoflow.config.rl`
(with the presets), :mod:`~grpoflow.config.grpo`, :mod:`~grpoflow.config.ppo`,
:mod:`~grpoflow.config.sft`, :mod:`~grpoflow.config.evaluate`,
:mod:`~grpoflow.config.orchestration` (with the ablation arms), :mod:`~grpoflow.config.launch`
(torchrun's options), :mod:`~grpoflow.config.tune`
(make tune's search spaces), :mod:`~grpoflow.config.params`
(the whole set), :mod:`~grpoflow.config.loader` (files, overrides, error wording) and
:mod:`~grpoflow.config.docs` (the configuration reference). The schema imports no maths module
and no verifier implementation: names are checked against light name tables.
"""

from grpoflow.config.base import ConfigError, has_dotted, set_dotted, unknown_name, value_at
from grpoflow.config.data import (
    PII_ENTITIES,
    DataConfig,
    LeakageConfig,
    PiiConfig,
    PiiEntity,
    SourceConfig,
    SplitConfig,
    SyntheticCodeConfig,
    SyntheticConfig,
)
from grpoflow.config.docs import schema_markdown
from grpoflow.config.evaluate import EvaluateConfig
from grpoflow.config.grpo import (
    ADVANTAGE_ESTIMATORS,
    BatchNormOptions,
    GroupNormOptions,
    GRPOConfig,
    NoAdvantageOptions,
)
from grpoflow.config.launch import DISTRIBUTED_STAGES, LaunchConfig
from grpoflow.config.loader import arm_params, load_params, validate_params
from grpoflow.config.model import LoraConfig, ModelConfig, PromptConfig
from grpoflow.config.orchestration import (
    ARMS,
    AblationConfig,
    ArmConfig,
    ExperimentConfig,
    OrchestrationConfig,
    TrackingConfig,
)
from grpoflow.config.params import Params, describe_schema
from grpoflow.config.ppo import CRITIC_ESTIMATORS, GaeOptions, PPOConfig
from grpoflow.config.rewards import RM_DEFAULT_PATH, RM_REWARD, RewardConfig, VerifierGateConfig
from grpoflow.config.rl import (
    PRESETS,
    AdaptiveKLConfig,
    DynamicSamplingConfig,
    EngineConfig,
    GenerationScheduleStep,
    PreflightConfig,
    RLConfig,
    RolloutCorrectionConfig,
    SamplingConfig,
    apply_preset,
    batch_problems,
    preset_values,
)
from grpoflow.config.sft import RewardModelConfig, SFTConfig
from grpoflow.config.tune import Dim, GRPOSpace, PPOSpace, PrunerConfig, TuneConfig
from verifiers.limits import Limits

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ARMS",
    "CRITIC_ESTIMATORS",
    "DISTRIBUTED_STAGES",
    "PII_ENTITIES",
    "PRESETS",
    "RM_DEFAULT_PATH",
    "RM_REWARD",
    "AblationConfig",
    "AdaptiveKLConfig",
    "ArmConfig",
    "BatchNormOptions",
    "ConfigError",
    "DataConfig",
    "Dim",
    "DynamicSamplingConfig",
    "EngineConfig",
    "EvaluateConfig",
    "ExperimentConfig",
    "GaeOptions",
    "GRPOConfig",
    "GRPOSpace",
    "GenerationScheduleStep",
    "GroupNormOptions",
    "LaunchConfig",
    "LeakageConfig",
    "Limits",
    "LoraConfig",
    "ModelConfig",
    "NoAdvantageOptions",
    "OrchestrationConfig",
    "PPOConfig",
    "PPOSpace",
    "Params",
    "PiiConfig",
    "PiiEntity",
    "PreflightConfig",
    "PromptConfig",
    "PrunerConfig",
    "RLConfig",
    "RewardConfig",
    "RewardModelConfig",
    "RolloutCorrectionConfig",
    "SFTConfig",
    "SamplingConfig",
    "SourceConfig",
    "SplitConfig",
    "SyntheticCodeConfig",
    "SyntheticConfig",
    "TrackingConfig",
    "TuneConfig",
    "VerifierGateConfig",
    "apply_preset",
    "arm_params",
    "batch_problems",
    "describe_schema",
    "has_dotted",
    "load_params",
    "preset_values",
    "schema_markdown",
    "set_dotted",
    "unknown_name",
    "validate_params",
    "value_at",
]
