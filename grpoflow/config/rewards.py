"""The reward components (verifiers by name, or a trained reward model) and the verifier gate.

Verifier names and options are checked through :mod:`verifiers.catalog` and the registry's lazy
resolution: this module imports no verifier implementation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from grpoflow.config.base import _Section, unknown_name

RM_REWARD = "rm"  # the reward name of a trained reward model, beside the registered verifiers
RM_DEFAULT_PATH = "models/reward_model"  # the reward_model stage's output


class RewardConfig(_Section):
    """One component of the reward: a verifier, or a trained reward model (name: rm)."""

    name: str = Field(
        ..., description="Registered verifier name (verifiers.names()): math, format, code; or rm, a reward model."
    )
    weight: float = Field(1.0, description="Weight of this component in the summed reward.")
    path: str | None = Field(
        None,
        description="The reward model's folder (name: rm only): a sequence classifier with one score; null: "
        f"{RM_DEFAULT_PATH}, which the reward_model stage trains.",
    )
    normalize: Literal["none", "running"] = Field(
        "none",
        description="Scale this component's scores: none, or running (minus the running mean, over the running std "
        "of every score so far; an RM's scores have no fixed scale).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="The verifier's own options (its Options class), e.g. math: {fallback_last_number: false}.",
    )

    @property
    def model_path(self) -> str:
        """The reward model this component loads (name: rm)."""
        return self.path or RM_DEFAULT_PATH

    @model_validator(mode="after")
    def _registered(self) -> RewardConfig:
        import verifiers

        if self.name == RM_REWARD:
            if self.options:
                raise ValueError("rm takes no options (its batch size is reward_model.score_batch_size)")
            return self
        if self.path is not None:
            raise ValueError(f"path is for a reward model (name: rm), not verifier {self.name!r}")
        if self.name not in verifiers.names():
            raise ValueError(unknown_name("verifier", self.name, [*verifiers.names(), RM_REWARD]))
        try:
            verifiers.options_model(self.name).model_validate(self.options)
        except ValidationError as exc:
            problems = "; ".join(f"options.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"verifier {self.name!r}: {problems}") from None
        return self


class VerifierGateConfig(_Section):
    """The validate_verifiers gate: thresholds and sample sizes."""

    min_precision: float = Field(
        0.99, ge=0, le=1, description="Lowest precision (wrong answers rejected) that passes the gate."
    )
    min_recall: float = Field(
        0.99, ge=0, le=1, description="Lowest recall (right answers in any surface form accepted)."
    )
    min_mutants_killed: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Lowest share of mutated reference programs (wrong constant, off-by-one, swapped operator, "
        "deleted return) a code set's tests must fail: a survivor is a wrong program the reward would pay for.",
    )
    min_rm_accuracy: float = Field(
        0.65, ge=0, le=1, description="Lowest held-out pairwise accuracy of a reward model in rewards (name: rm)."
    )
    min_rm_win_rate: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Lowest share of gold solutions the reward model scores above a perturbed wrong one (a wrong final "
        "answer, a mutated program).",
    )
    max_examples: int = Field(2000, ge=1, description="Reference answers sampled per split/benchmark for validation.")
    workers: int = Field(
        2, ge=1, description="Processes a verifier may use while the gate scores its cases (the math-verify slow path)."
    )
