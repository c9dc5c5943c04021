"""Where a process computes: decided here, once, for every stage.

``cuda:LOCAL_RANK`` where CUDA is available (the GPU a launcher gave this rank, the one DeepSpeed's
CUDA accelerator picks too), else ``cpu``; ``GRPOFLOW_DEVICE`` overrides both (``cpu`` on a GPU box,
or the device audit's stand-in device, :mod:`tests.device_audit`). Every model a stage computes with
is placed here, and every tensor a stage builds is built on its model's device: nothing else calls
``.cuda()`` or assumes the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

DEVICE_ENV = "GRPOFLOW_DEVICE"


def compute_device() -> torch.device:
    """The device this process computes on (see the module's docstring)."""
    chosen = os.environ.get(DEVICE_ENV, "").strip()
    if chosen:
        return torch.device(chosen)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device ``model``'s parameters live on (the CPU for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def on(batch: Mapping[str, torch.Tensor], device: torch.device | str) -> dict[str, torch.Tensor]:
    """A collated batch (``input_ids``, ``attention_mask``, ...) with every tensor on ``device``."""
    return {name: tensor.to(device) for name, tensor in batch.items()}


def describe() -> str:
    """One line for a stage's config check: the device, and the GPU's name where it is one."""
    device = compute_device()
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index or 0
        return f"device: {device} ({torch.cuda.get_device_name(index)}, bf16 {torch.cuda.is_bf16_supported()})"
    source = f" ({DEVICE_ENV})" if os.environ.get(DEVICE_ENV, "").strip() else ""
    return f"device: {device}{source}"
