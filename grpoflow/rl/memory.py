"""Where a training process's memory goes, counted from its tensors: each model's weights, the
gradients of what it trains and its optimizer's states, beside the memory in use once the run is
built (before step 1) and at its peak. :func:`grpoflow.evaluation.compare.memory_breakdown` turns
two runs' records into the split the GRPO / PPO comparison shows (the source article's claim:
GRPO drops the critic's weights, gradients, optimizer states and activations).
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

import torch

from grpoflow.models.lora import AdaptersDisabled

MIB = 2**20


def current_memory_mb() -> float:
    """Memory in use now: CUDA allocations on a GPU, else this process's resident set (Linux)."""
    if torch.cuda.is_available():
        return torch.cuda.memory_allocated() / MIB
    with open("/proc/self/statm") as fh:
        resident_pages = int(fh.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / MIB


def settled_memory_mb() -> float:
    """:func:`current_memory_mb` once garbage is collected and glibc has handed its free heap back to
    the system: what loading left resident (conversions, temporary copies) is not counted as in use."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the resident set as it is
        pass
    return current_memory_mb()


def _optimizer(engine: Any) -> torch.optim.Optimizer | None:
    """The torch optimizer under DeepSpeed's wrappers (which keep the states), or None."""
    opt = getattr(engine, "optimizer", None)
    for _ in range(4):  # ZeRO and bf16 wrap the torch optimizer one or two levels deep
        if opt is None or isinstance(opt, torch.optim.Optimizer):
            return opt
        opt = getattr(opt, "optimizer", None)
    return None


def _state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of the tensors an optimizer keeps per parameter (Adam's two moments, its step counts)."""
    if optimizer is None:
        return 0
    return sum(
        t.numel() * t.element_size()
        for per_param in optimizer.state.values()
        for t in per_param.values()
        if isinstance(t, torch.Tensor)
    )


MODEL_STATE_KEYS = ("parameters", "trainable_parameters", "weights_mb", "gradients_mb", "optimizer_mb")
"""What :func:`model_state` counts of one model, in its order."""


def model_state(module: torch.nn.Module, engine: Any = None) -> dict[str, float]:
    """One model's parameters (all, and those it trains) and the MiB of its weights, of the gradients
    of its trained parameters (one per trained weight, in its dtype) and of its optimizer's states
    as they stand (measured: zero before the first step, when AdamW has made none yet)."""
    params = list(module.parameters())
    trained = [p for p in params if p.requires_grad]
    counts = (
        sum(p.numel() for p in params),
        sum(p.numel() for p in trained),
        sum(p.numel() * p.element_size() for p in params) / MIB,
        sum(p.numel() * p.element_size() for p in trained) / MIB,
        _state_bytes(_optimizer(engine)) / MIB,
    )
    return dict(zip(MODEL_STATE_KEYS, counts, strict=True))


def run_models(rl_run: Any) -> dict[str, dict[str, float]]:
    """The state of each model a run holds, by role: the policy, each extra engine (a critic) and the
    reference where it is a model of its own (a LoRA run's is the policy with its adapters off: no
    memory of its own)."""
    models = {"policy": model_state(rl_run.engine.module, rl_run.engine)}
    models |= {name: model_state(engine.module, engine) for name, engine in rl_run.engines.items()}
    ref = rl_run.reference
    if ref is not None and not isinstance(ref, AdaptersDisabled):
        models["reference"] = model_state(ref)
    return models


def memory_record(models: dict[str, dict], before_training_mb: float, peak_mb: float) -> dict[str, Any]:
    """What a run's metrics keep of its memory: in use before step 1, the peak, and each model's
    state (:func:`run_models`, taken before the export merges a LoRA policy's adapters)."""
    return {"before_training_mb": before_training_mb, "peak_mb": peak_mb, "models": models}
