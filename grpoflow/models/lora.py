"""LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") through
peft: the policy trains ``W + (alpha / r) * B @ A`` with ``W`` frozen.

The reference policy is the same model with its adapters disabled, not a second copy; vLLM and the
exported model get the merged weights ``W + (alpha / r) * B @ A``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from grpoflow.config import LoraConfig

_PREFIX = "base_model.model."


class LoraTargetError(ValueError):
    """``model.lora.target_modules`` names layers the model does not have."""


def linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers: what ``target_modules`` may name."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})


def add_adapters(model: torch.nn.Module, cfg: LoraConfig, task_type: str = "CAUSAL_LM") -> torch.nn.Module:
    """``model`` wrapped with trainable adapters on ``cfg.target_modules``; everything else frozen.
    ``task_type``: peft's, ``FEATURE_EXTRACTION`` for a bare trunk (a critic's) without a LM head."""
    import peft

    available = linear_names(model)
    missing = sorted(set(cfg.target_modules) - set(available))
    if missing:
        raise LoraTargetError(
            f"model.lora.target_modules: {missing} are not linear layers of this model; it has {available}"
        )
    config = peft.LoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        bias="none",
        task_type=task_type,
    )
    return peft.get_peft_model(model, config)


def is_zero3(model: torch.nn.Module) -> bool:
    """Whether ZeRO-3 partitions ``model``'s parameters (DeepSpeed tags each with a ``ds_id``)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def has_adapters(model: Any) -> bool:
    """Whether ``model`` is a peft model with LoRA adapters."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


class AdaptersDisabled:
    """The reference policy of a LoRA run: the policy's forward with its adapters switched off."""

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The base model's outputs (exactly: the adapters are bypassed, not zeroed)."""
        with self.model.disable_adapter():
            return self.model(*args, **kwargs)


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The weights a plain model of the same architecture would have: for a LoRA model each target
    layer's ``W + scale * B @ A`` under the base model's names; any other model's own state dict."""
    if not has_adapters(model):
        return dict(model.state_dict())
    from peft.tuners.lora import Linear as LoraLinear

    inner = model.base_model.model
    merged = {k.replace(".base_layer", ""): v for k, v in inner.state_dict().items() if "lora_" not in k}
    for name, module in inner.named_modules():
        if isinstance(module, LoraLinear) and module.active_adapters:
            merged[f"{name}.weight"] = merged_lora_weight(module)
    return merged


@torch.no_grad()
def merged_lora_weight(layer: Any) -> torch.Tensor:
    """One LoRA layer's ``W + scale * B @ A`` over its active adapters, in the base weight's dtype."""
    weight = layer.base_layer.weight.detach()
    for adapter in layer.active_adapters:
        weight = weight + layer.get_delta_weight(adapter).to(weight.dtype)
    return weight


@contextmanager
def merged_for_sampling(model: Any) -> Iterator[Any]:
    """Inside, each LoRA layer's base weight is ``W + scale * B @ A`` and the adapters are off: the
    same function with one matmul per layer instead of three, for sampling without gradients (the
    rollout's decode loop runs every layer once per token). On exit each layer gets its own ``W``
    back, the very tensor, so nothing drifts. Under ZeRO-3 (partitioned weights) nothing is merged.
    Costs one merged copy of the adapted layers' weights while inside."""
    if not has_adapters(model) or is_zero3(model):
        yield model
        return
    from peft.tuners.lora import Linear as LoraLinear

    layers = [m for m in model.modules() if isinstance(m, LoraLinear) and m.active_adapters]
    own = [layer.base_layer.weight.data for layer in layers]
    try:
        merged = [merged_lora_weight(layer) for layer in layers]
        for layer, weight in zip(layers, merged, strict=True):
            layer.base_layer.weight.data = weight
        with model.disable_adapter():
            yield model
    finally:
        for layer, weight in zip(layers, own, strict=True):
            layer.base_layer.weight.data = weight


def merged_model(model: Any) -> torch.nn.Module:
    """A plain model with the adapters merged in, for export (``model`` itself if it has none)."""
    if not has_adapters(model):
        return model
    return model.merge_and_unload()
