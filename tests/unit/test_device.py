"""The one place that decides where a process computes (grpoflow/models/device.py), and the engine's
refusal of a placement that disagrees with it."""

from __future__ import annotations

import pytest
import torch

from grpoflow.models import device
from grpoflow.models.engine import check_placement


def test_the_device_is_the_override_else_the_ranks_gpu_else_the_cpu(monkeypatch):
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.compute_device() == torch.device("cpu") and device.describe() == "device: cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert device.compute_device() == torch.device("cuda", 3)  # the GPU a launcher gave this rank
    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    assert device.compute_device() == torch.device("cpu")  # the CPU on a GPU machine, when asked
    assert device.describe() == f"device: cpu ({device.DEVICE_ENV})"


def test_an_engine_placed_elsewhere_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    check_placement("cpu")
    with pytest.raises(RuntimeError, match=r"DeepSpeed placed its engine on cuda:0, but this process computes on cpu"):
        check_placement("cuda:0")


def test_a_models_device_is_its_parameters():
    assert device.model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert device.model_device(torch.nn.ReLU()) == torch.device("cpu")  # no parameters
