"""The random state a resumed run needs to draw what the uninterrupted run would have drawn.

Python's generator (prompt order), torch's CPU generator and, once this process uses CUDA, the
generator of the device it computes on (:func:`grpoflow.models.device.compute_device`, named: a
colocated vLLM engine makes ``cuda:0`` current on every rank). On a GPU the update's dropout (LoRA's
``lora_dropout``) draws from the device's generator, and so does sampling wherever nothing reseeds it
(the HF engine reseeds every generator at each ``generate``; vLLM seeds its own). Each is a plain value
(tuples, numbers, uint8 tensors), so a checkpoint's file of them loads with
``torch.load(weights_only=True)``. A state saved on a GPU resumes on CPU without its CUDA part (said
once); one saved on CPU resumes on a GPU with the device's generator as the seed left it.
"""

from __future__ import annotations

import random
import warnings

import torch

from grpoflow.models.device import compute_device

KEYS = {"python", "torch"}
CUDA = "cuda"
CUDA_STATE_BYTES = (8, 16)  # what a CUDA generator's set_state accepts (seed, offset; 16 since torch 2.1)


def _cuda_device() -> torch.device:
    device = compute_device()
    return device if device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())


def capture() -> dict:
    """This process's generators' states; ``cuda`` only where CUDA is initialised (asking would initialise it)."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state[CUDA] = torch.cuda.get_rng_state(_cuda_device())
    return state


def restore(state: dict) -> None:
    """Put back what :func:`capture` returned (nothing for an empty state: a rank the saving run did not have)."""
    if not state:
        return
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if CUDA not in state:
        return
    if torch.cuda.is_available():
        torch.cuda.set_rng_state(state[CUDA], _cuda_device())
    else:
        warnings.warn("the checkpoint's CUDA generator state is not restored: no CUDA device here", stacklevel=2)


def problem(state: object) -> str | None:
    """What makes ``state`` unusable as a :func:`capture` value; None when it is one."""
    if not isinstance(state, dict) or not KEYS <= set(state) or not set(state) <= KEYS | {CUDA}:
        return "expected a dict with keys 'python' and 'torch' (and 'cuda' from a GPU run)"
    try:
        random.Random().setstate(state["python"])  # validates without touching the global generator
    except (TypeError, ValueError) as exc:
        return f"'python' is not a random.getstate() value ({exc})"
    reference = torch.get_rng_state()
    t = state["torch"]
    if not isinstance(t, torch.Tensor) or t.dtype != reference.dtype or t.shape != reference.shape:
        return "'torch' is not a torch.get_rng_state() tensor"
    cuda = state.get(CUDA)
    if CUDA in state and (
        not isinstance(cuda, torch.Tensor) or cuda.dtype != torch.uint8 or cuda.numel() not in CUDA_STATE_BYTES
    ):
        return "'cuda' is not a torch.cuda.get_rng_state() tensor"
    return None
