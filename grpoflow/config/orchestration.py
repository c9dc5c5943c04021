"""Identity, tracking, the ablation's arms and how Prefect runs the stages."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from grpoflow import catalog
from grpoflow.config.base import AlgorithmName, _Section, unknown_name


class ExperimentConfig(_Section):
    """Identity and seed of a parameter set."""

    name: str = Field(
        "default",
        description="Name of this parameter set; the MLflow experiment is grpoflow-<name>. Left out of a file: the "
        "file's name (params/mine.yaml: mine).",
    )
    seed: int = Field(
        0, ge=0, description="Global seed: data generation, splits, model init and sampling derive from it."
    )
    stages: list[str] | None = Field(
        None,
        description="The pipeline stages this set runs (tasks/stages.py names; null: all). A stage left out drops "
        "out of its consumers' inputs where it can (evaluate evaluates fewer models).",
    )
    cpu_kernels: Literal["native", "avx2"] = Field(
        "avx2",
        description="CPU arithmetic: native (the widest kernels this CPU has; the digits differ between CPU types) "
        "or avx2 (torch's and oneDNN's AVX2 paths, MKL's vendor-neutral COMPATIBLE branch: the same digits on any "
        "x86-64 CPU with AVX2, Intel or AMD).",
    )


class TrackingConfig(_Section):
    """MLflow tracking."""

    experiment: str | None = Field(None, description="MLflow experiment; null means grpoflow-<experiment.name>.")


class ArmConfig(_Section):
    """One arm of the ablation: an algorithm and the overrides it trains with, on the shared data,
    reference and budget."""

    algorithm: AlgorithmName = Field(
        default_factory=catalog.default, description="The training stage's algorithm (grpoflow.catalog)."
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Dotted keys (e.g. grpo.advantage_estimator) set for this arm only."
    )


def _listed_twice(values: list[Any]) -> list[Any]:
    """The values ``values`` holds more than once, each once, in the order of their second listing."""
    return list(dict.fromkeys(v for i, v in enumerate(values) if v in values[:i]))


def _arm_text(arm: ArmConfig) -> str:
    """An arm as one reads it: its algorithm, and its overrides where it has any."""
    return arm.algorithm + (f" with {arm.overrides}" if arm.overrides else "")


def _extends(arm: ArmConfig, builtin: ArmConfig) -> bool:
    """Whether ``arm`` is ``builtin`` with overrides added: the same algorithm, each of its overrides kept."""
    return arm.algorithm == builtin.algorithm and all(
        k in arm.overrides and arm.overrides[k] == v for k, v in builtin.overrides.items()
    )


def builtin_arms() -> dict[str, ArmConfig]:
    """The arms `make ablation ARMS="..."` knows by name: each algorithm of the catalog as it is, then
    GRPO's variants (:data:`VARIANTS`); a set may add its own (``ablation.custom_arms``)."""
    return {**{name: ArmConfig(algorithm=name) for name in catalog.names()}, **VARIANTS}


# Named variants of the default algorithm's settings, arms beside the catalog's algorithms.
VARIANTS: dict[str, ArmConfig] = {
    "dr_grpo": ArmConfig(overrides={"grpo.advantage_estimator": "dr_grpo", "rl.aggregation": "dr_grpo"}),
    "rloo": ArmConfig(overrides={"grpo.advantage_estimator": "rloo"}),
    "reinforce_pp": ArmConfig(overrides={"grpo.advantage_estimator": "reinforce_pp"}),
    "dapo": ArmConfig(overrides={"rl.preset": "dapo"}),
}
ARMS = builtin_arms()  # as the catalog was at import; the schema asks builtin_arms() again


class AblationConfig(_Section):
    """The ablation flow's arms and seeds: each (arm, seed) is a DVC stage of its own, so adding a seed
    trains only that seed."""

    arms: list[str] = Field(
        default_factory=list, description="Arms to train, the first the baseline of the verdicts (ARMS or custom_arms)."
    )
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="Training seeds of every arm.")
    custom_arms: dict[str, ArmConfig] = Field(
        default_factory=dict,
        description="This set's own named arms ([a-z0-9_] names; a built-in's name only to add overrides to it).",
    )

    @model_validator(mode="after")
    def _known_arms(self) -> AblationConfig:
        builtin = builtin_arms()
        for name, arm in self.custom_arms.items():  # every one, named in arms or not: where it is written
            if name in builtin and not _extends(arm, builtin[name]):
                raise ValueError(
                    f"custom_arms.{name}: {name!r} is a built-in arm ({_arm_text(builtin[name])}); one of its name "
                    "may add overrides to it (as a tuned overlay does) but not change what makes it that arm: "
                    "name yours otherwise"
                )
            if not re.fullmatch(r"[a-z0-9_]+", name):
                raise ValueError(f"custom_arms.{name}: use lower-case letters, digits and _ (it names DVC stages)")
        known = {**builtin, **self.custom_arms}
        for name in self.arms:
            if name not in known:
                raise ValueError(unknown_name("arm", name, sorted(known)))
        for what, values in (("arms", list(self.arms)), ("seeds", list(self.seeds))):
            if twice := _listed_twice(values):
                raise ValueError(f"{what} listed twice: {', '.join(map(str, twice))} (in {values})")
        return self

    def arm(self, name: str) -> ArmConfig:
        """Arm ``name``'s definition (this set's own first)."""
        return self.custom_arms.get(name) or builtin_arms()[name]


class OrchestrationConfig(_Section):
    """How Prefect runs the stages (deployments in prefect.yaml read the work pool from here)."""

    work_pool: str = Field(
        "grpoflow-local",
        description="Prefect work pool the deployments submit to (`make serve` creates it as a process pool).",
    )
    gpu_concurrency_limit: str | None = Field(
        "gpu", description="Prefect global concurrency limit a GPU stage holds one slot of while it runs (null: none)."
    )
    gpu_stages: list[str] = Field(
        default_factory=lambda: ["sft", *[a for a in catalog.default_run() if a in catalog.gpu_limited()], "evaluate"],
        description="dvc.yaml stages that need the accelerator (default: sft, evaluate and each algorithm's stage "
        "whose spec says it is GPU-limited).",
    )
    stage_retries: int = Field(
        1, ge=0, description="Prefect retries of a failed stage (training resumes from its last checkpoint)."
    )
    retry_delay_seconds: float = Field(10.0, ge=0, description="Wait before a retry.")
    record_experiment: bool = Field(
        True, description="Save every successful flow run as a DVC experiment (`dvc exp show`)."
    )
    dvc_remote: str | None = Field(
        None, description="DVC remote to push data and models to after a successful run (null: no push)."
    )
