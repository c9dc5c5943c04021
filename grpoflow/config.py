"""The one typed schema for ``params/*.yaml``.

Every stage reads its section of the same file; DVC tracks the same sections as stage
params. Unknown keys are errors (a misspelt key must never be silently ignored), and every
error names the file and the dotted key.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """A params file that does not validate; the message names the file and each bad key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExperimentConfig(_Section):
    name: str = Field("default", description="Name of this parameter set; the MLflow experiment is grpoflow-<name>.")
    seed: int = Field(0, ge=0, description="Global seed: data generation, splits, model init and sampling derive from it.")


class SyntheticConfig(_Section):
    num_examples: int = Field(3000, ge=1, description="Problems to generate before de-duplication and splitting.")
    min_ops: int = Field(1, ge=1, description="Fewest arithmetic steps in one problem.")
    max_ops: int = Field(2, ge=1, description="Most arithmetic steps in one problem.")
    operand_min: int = Field(1, ge=0, description="Smallest starting amount and addend/subtrahend.")
    operand_max: int = Field(20, ge=1, description="Largest starting amount and addend/subtrahend.")
    factor_max: int = Field(5, ge=2, description="Largest multiplier or divisor for '*' and '/' steps.")
    ops: list[Literal["+", "-", "*", "/"]] = Field(
        ["+", "-", "*"], min_length=1, description="Operations a step may use."
    )

    @model_validator(mode="after")
    def _ranges(self) -> "SyntheticConfig":
        if self.min_ops > self.max_ops:
            raise ValueError(f"min_ops ({self.min_ops}) must be <= max_ops ({self.max_ops})")
        if self.operand_min > self.operand_max:
            raise ValueError(f"operand_min ({self.operand_min}) must be <= operand_max ({self.operand_max})")
        return self


class SplitConfig(_Section):
    train: float = Field(0.8, gt=0, lt=1, description="Share of prompts for training.")
    val: float = Field(0.1, gt=0, lt=1, description="Share of prompts for validation (model selection, gates).")
    test: float = Field(0.1, gt=0, lt=1, description="Share of prompts held out for the final evaluation.")

    @model_validator(mode="after")
    def _sums_to_one(self) -> "SplitConfig":
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must be 1, got {total:g}")
        return self


class DataConfig(_Section):
    source: Literal["synthetic"] = Field("synthetic", description="Where prompts come from: the built-in generator.")
    license: str = Field("CC0-1.0", description="Licence recorded for the generated rows.")
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig, description="Knobs of the built-in generator.")
    split: SplitConfig = Field(default_factory=SplitConfig, description="Train/val/test shares, by prompt hash.")


class ModelConfig(_Section):
    name_or_path: str | None = Field(
        None, description="A model path or hub name to fine-tune; null builds the tiny model below from scratch."
    )
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="Architecture of the tiny model.")
    vocab_size: int = Field(384, ge=64, description="Target vocabulary size of the offline-trained tokenizer.")
    hidden_size: int = Field(128, ge=32, description="Width of the tiny model.")
    num_layers: int = Field(4, ge=1, description="Transformer blocks of the tiny model.")
    num_heads: int = Field(4, ge=1, description="Attention heads (head size = hidden/heads; vLLM on CPU needs >= 32).")
    intermediate_size: int = Field(512, ge=32, description="MLP width of the tiny model.")
    max_length: int = Field(256, ge=16, description="Longest prompt + completion in tokens.")

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self


class TrackingConfig(_Section):
    experiment: str | None = Field(None, description="MLflow experiment; null means grpoflow-<experiment.name>.")


class Params(_Section):
    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig, description="Identity and seed of the run.")
    data: DataConfig = Field(default_factory=DataConfig, description="The prepare stage.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking.")

    @property
    def mlflow_experiment(self) -> str:
        return self.tracking.experiment or f"grpoflow-{self.experiment.name}"


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid at ``loc`` (the parent of a rejected key), for a did-you-mean hint."""
    for part in loc:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None) if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return list(model.model_fields)


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "<top level>"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _allowed_keys(Params, loc[:-1]), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"{key}: unknown key{hint}"
    got = err.get("input")
    got_text = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"{key}: {err['msg']}{got_text}"


def validate_params(raw: dict[str, Any], source: str = "<params>") -> Params:
    """Validate a params mapping, raising :class:`ConfigError` that names every bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = "\n".join(f"  - {_describe(e)}" for e in exc.errors())
        raise ConfigError(f"{source}: invalid parameters\n{lines}") from None


def load_params(path: str | Path, overrides: dict[str, Any] | None = None) -> Params:
    """Read, merge dotted-key ``overrides`` into, and validate a params YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    return validate_params(raw, source=str(path))


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: '{part}' is not a section")
    node[leaf] = value


def describe_schema(model: type[BaseModel] = Params, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, description)`` for every field: the reference table in the README."""
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(describe_schema(ann, prefix=f"{key}."))
        else:
            rows.append((key, repr(field.get_default(call_default_factory=True)), field.description or ""))
    return rows
