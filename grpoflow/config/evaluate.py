"""The evaluate stage's section."""

from __future__ import annotations

from pydantic import Field, model_validator

from grpoflow.config.base import _Section, unknown_name


class EvaluateConfig(_Section):
    """The evaluate stage: which sets, how many samples, which verifier judges."""

    max_examples: int = Field(300, ge=1, description="Prompts per test split / benchmark (a fixed, seeded sample).")
    n_samples: int = Field(8, ge=1, description="Samples per prompt for pass@k and maj@k.")
    k: int = Field(4, ge=1, description="k of pass@k and maj@k (<= n_samples).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature for pass@1, pass@k and maj@k.")
    greedy: bool = Field(
        True, description="Also score greedy decoding (T = 0) as `greedy`; pass@1 is always from the n samples."
    )
    max_loss_increase: float = Field(
        0.25,
        ge=0,
        description="Held-out loss (nats/token) a policy may gain over the reference before 'forgetting' is flagged.",
    )
    verifier: str | None = Field(
        None,
        description="Verifier that judges a math row's answer right (its accepts: score >= 0.5) for accuracy, pass@k "
        "and maj@k; code rows are judged by their tests; null: the first math verifier of rewards.",
    )

    @model_validator(mode="after")
    def _k_le_n(self) -> EvaluateConfig:
        if self.k > self.n_samples:
            raise ValueError(f"k ({self.k}) must be <= n_samples ({self.n_samples})")
        import verifiers

        if self.verifier is not None and self.verifier not in verifiers.names():
            raise ValueError(unknown_name("verifier", self.verifier, verifiers.names()))
        return self
