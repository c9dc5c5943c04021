"""The policy's full weights as a plain model of its architecture has them, for a rollout engine's
weight sync. Under ZeRO-3 every rank holds a shard of each parameter; the shards are gathered one
module at a time and copied to the host before the next module's are, so the sync's peak extra
device memory is one module's full parameters (a LoRA layer's: its base weight and adapters), not
the model's. Without ZeRO-3 the weights are the model's own (:func:`merged_state_dict`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from grpoflow.models.lora import has_adapters, is_zero3, merged_lora_weight, merged_state_dict


def _persistent_buffers(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for name, buf in module.named_buffers(recurse=False):
        if buf is not None and name not in module._non_persistent_buffers_set:
            yield name, buf


def _module_weights(name: str, module: torch.nn.Module, lora_layer: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """One module's entries of the plain state dict, its parameters gathered: a LoRA layer's as its
    merged ``W + scale * B @ A`` (and bias) under the base layer's names, any other its own."""
    prefix = f"{name}." if name else ""
    if isinstance(module, lora_layer):
        yield f"{prefix}weight", merged_lora_weight(module)
        if module.base_layer.bias is not None:
            yield f"{prefix}bias", module.base_layer.bias
        return
    yield from ((prefix + key, p) for key, p in module.named_parameters(recurse=False))
    yield from ((prefix + key, b) for key, b in _persistent_buffers(module))


@torch.no_grad()
def full_state_dict(model: torch.nn.Module, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """``model``'s plain state dict (LoRA merged) on ``device``; under ZeRO-3 gathered module by
    module. Every rank must call it together: each gather is a collective."""
    if not is_zero3(model):
        return {k: v.detach().to(device) for k, v in merged_state_dict(model).items()}
    from peft.tuners.lora import Linear as LoraLinear

    from grpoflow.models.engine import import_deepspeed

    gather = import_deepspeed().zero.GatheredParameters
    inner = model.base_model.model if has_adapters(model) else model
    state: dict[str, torch.Tensor] = {}
    inside_lora: tuple[str, ...] = ()
    for name, module in inner.named_modules():
        if inside_lora and name.startswith(inside_lora):  # a LoRA layer's parts: merged with it
            continue
        lora = isinstance(module, LoraLinear)
        if lora:
            inside_lora += (f"{name}.",)
        params = list(module.parameters(recurse=lora))
        with gather(params, modifier_rank=None, enabled=bool(params)):
            for key, tensor in _module_weights(name, module, LoraLinear):
                state[key] = tensor.detach().to(device, copy=True)
    return state
