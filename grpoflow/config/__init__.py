"""The one typed schema for ``params/*.yaml``.

Every stage reads its section of the same file; DVC tracks the same sections as stage
params. Unknown keys are errors (a misspelt key must never be silently ignored), and every
error names the file and the dotted key. One module per owner: :mod:`~grpoflow.config.data`,
:mod:`~grpoflow.config.model`, :mod:`~grpoflow.config.rewards`, :mod:`~grpoflow.config.rl`
(with the presets), :mod:`~grpoflow.config.sft`, :mod:`~grpoflow.config.evaluate`,
:mod:`~grpoflow.config.orchestration` (with the ablation arms), :mod:`~grpoflow.config.launch`
(torchrun's options), :mod:`~grpoflow.config.tune`
(make tune's search spaces), :mod:`~grpoflow.config.params`
(the whole set, with each algorithm's own section from its folder, :mod:`grpoflow.algorithms`),
:mod:`~grpoflow.config.loader` (files, overrides, error wording) and
:mod:`~grpoflow.config.docs` (the configuration reference). The schema imports no maths module
and no verifier implementation: names are checked against light name tables.
"""

from typing import TYPE_CHECKING, Any

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
from grpoflow.config.evaluate import EvaluateConfig
from grpoflow.config.launch import DISTRIBUTED_STAGES, LaunchConfig
from grpoflow.config.model import LoraConfig, ModelConfig, PromptConfig
from grpoflow.config.orchestration import (
    ARMS,
    AblationConfig,
    ArmConfig,
    ExperimentConfig,
    OrchestrationConfig,
    TrackingConfig,
)
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
from grpoflow.config.tune import Dim, PrunerConfig, SharedTuneConfig, Space
from verifiers.limits import Limits

if TYPE_CHECKING:
    from grpoflow.config.docs import schema_markdown
    from grpoflow.config.loader import arm_params, load_params, validate_params
    from grpoflow.config.params import Params, TuneConfig, describe_schema


def __getattr__(name: str) -> Any:
    """The whole schema's names, loaded on first use. The schema is built from every algorithm's
    settings (grpoflow/algorithms/<name>/config.py), which import this package's sections: importing
    one of them first must not build the schema while it is half loaded."""
    if name in ("Params", "TuneConfig", "describe_schema"):
        from grpoflow.config import params

        return getattr(params, name)
    if name in ("arm_params", "load_params", "validate_params"):
        from grpoflow.config import loader

        return getattr(loader, name)
    if name == "schema_markdown":
        from grpoflow.config import docs

        return docs.schema_markdown
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARMS",
    "DISTRIBUTED_STAGES",
    "PII_ENTITIES",
    "PRESETS",
    "RM_DEFAULT_PATH",
    "RM_REWARD",
    "AblationConfig",
    "AdaptiveKLConfig",
    "ArmConfig",
    "ConfigError",
    "DataConfig",
    "Dim",
    "DynamicSamplingConfig",
    "EngineConfig",
    "EvaluateConfig",
    "ExperimentConfig",
    "GenerationScheduleStep",
    "LaunchConfig",
    "LeakageConfig",
    "Limits",
    "LoraConfig",
    "ModelConfig",
    "OrchestrationConfig",
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
    "SharedTuneConfig",
    "Space",
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
