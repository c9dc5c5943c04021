"""A checkpoint's random state: what a resumed run draws equals what the uninterrupted run drew,
the CUDA generator's included (faked here: a stand-in for the device's generator; tests/gpu has the
real one), and a malformed state is refused by name."""

from __future__ import annotations

import random

import pytest
import torch

from grpoflow.models import rng
from grpoflow.rl import loop_state
from tests.unit.test_checkpoint import FakeEngine, save


class FakeDeviceGenerator:
    """The current CUDA device's generator as torch.cuda exposes it: a uint8 state that draws advance."""

    def __init__(self) -> None:
        self.state = torch.arange(16, dtype=torch.uint8)  # a CUDA generator's 16 bytes: seed and offset

    def draw(self) -> int:
        self.state = (self.state * 5 + 1) % 251
        return int(self.state.sum())

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": self.state.clone())
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": setattr(self, "state", state))


def _draws(device: FakeDeviceGenerator | None = None) -> tuple:
    return random.random(), torch.rand(3).tolist(), device.draw() if device else None


def test_restoring_a_captured_state_draws_the_same_numbers_again(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # as on a CPU (another test may have used CUDA)
    random.seed(1)
    torch.manual_seed(1)
    state = rng.capture()
    first = _draws()
    _draws()
    rng.restore(state)
    assert _draws() == first
    assert rng.problem(state) is None and "cuda" not in state  # CUDA was never initialised here


def test_a_gpu_runs_device_generator_goes_through_the_checkpoint_and_back(tmp_path, monkeypatch):
    device = FakeDeviceGenerator()
    device.install(monkeypatch)
    device.draw()
    save(tmp_path / "ckpt", "f" * 64, 2)  # the checkpoint captures every generator, the device's too
    uninterrupted = [device.draw() for _ in range(3)]
    resumed, _ = loop_state.load(FakeEngine(), tmp_path / "ckpt", "f" * 64)
    assert resumed is not None
    rng.restore(resumed.state.rng)
    assert [device.draw() for _ in range(3)] == uninterrupted


def test_a_gpu_state_resumes_on_cpu_with_its_cpu_generators_and_says_so(monkeypatch):
    device = FakeDeviceGenerator()
    device.install(monkeypatch)
    state = rng.capture()
    first = _draws()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="CUDA generator state is not restored"):
        rng.restore(state)
    assert _draws()[:2] == first[:2]


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"cuda": torch.zeros(4, dtype=torch.float32)}, "'cuda' is not a torch.cuda.get_rng_state"),
        ({"cuda": None}, "'cuda' is not a torch.cuda.get_rng_state"),
        ({"cuda": torch.zeros(12, dtype=torch.uint8)}, "'cuda' is not a torch.cuda.get_rng_state"),  # wrong size
        ({"numpy": 1}, "expected a dict with keys"),
        ({"torch": torch.zeros(3, dtype=torch.uint8)}, "'torch' is not a torch.get_rng_state"),
    ],
)
def test_a_malformed_state_is_refused_by_what_is_wrong(change, reason):
    state = {**rng.capture(), **change}
    assert reason in (rng.problem(state) or "")
    assert rng.problem({**rng.capture(), "cuda": torch.zeros(16, dtype=torch.uint8)}) is None
