"""``torch.cuda``'s graph API on the CPU, with a CUDA graph's semantics, so that the code around a
capture and its replays (:mod:`grpoflow.rollout.static_decode`) runs in a CPU test and fails there when
it would fail or go wrong on a GPU (the CUDA Programming Guide, "CUDA Graphs"; PyTorch's
``torch.cuda.graph`` notes):

- a capture records the kernels and runs none: the tensors the captured code writes are put back as
  they were, and the tensors it makes hold garbage (NaN) until the first replay;
- a replay runs the recorded kernels again on the tensors they were recorded with: a tensor the code
  rebinds after the capture is not seen, a value Python computed during the capture stays as it was;
- a read of the device while capturing (``.item()``, ``nonzero``) is refused, as CUDA refuses it.

Each aten call under the capture is recorded with its arguments (the same tensor objects) and its
outputs; a replay calls it again and copies what it returns into the recorded outputs, the addresses
later kernels read.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.device_audit import SYNCING


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The argument tensors ``func`` writes in place (its schema's ``Tensor(a!)`` arguments)."""
    found = []
    values = list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args) :]]
    for argument, value in zip(func._schema.arguments, values):
        if argument.alias_info is not None and argument.alias_info.is_write and isinstance(value, torch.Tensor):
            found.append(value)
    return found


@dataclass(repr=False)  # a failing test's report prints its locals: thousands of tensors would stall it
class _Call:
    func: Any
    args: tuple
    kwargs: dict
    outputs: list[torch.Tensor]


@dataclass
class FakeGraph:
    """``torch.cuda.CUDAGraph``: what a capture recorded, and ``replay``."""

    calls: list[_Call] = field(default_factory=list)
    replays: int = 0

    def __repr__(self) -> str:  # a failing test's report prints it: not every recorded tensor
        return f"FakeGraph({len(self.calls)} calls, {self.replays} replays)"

    def replay(self) -> None:
        with torch.no_grad():
            for call in self.calls:
                fresh, _ = tree_flatten(call.func(*call.args, **call.kwargs))
                for old, new in zip(call.outputs, [t for t in fresh if isinstance(t, torch.Tensor)]):
                    if old.data_ptr() != new.data_ptr():  # an in-place kernel wrote its output already
                        old.copy_(new)
        self.replays += 1


class _Capture(TorchDispatchMode):
    """Records every aten call into ``graph``; keeps each tensor a call writes, as it was before."""

    def __init__(self, graph: FakeGraph):
        super().__init__()
        self.graph = graph
        self.before: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in SYNCING:  # the host would wait for the stream: CUDA refuses it in a capture
            raise RuntimeError(f"operation not permitted when stream is capturing ({func})")
        for tensor in _written(func, args, kwargs):
            self.before.setdefault(id(tensor), (tensor, tensor.detach().clone()))
        out = func(*args, **kwargs)
        flat, _ = tree_flatten(out)
        self.graph.calls.append(_Call(func, args, kwargs, [t for t in flat if isinstance(t, torch.Tensor)]))
        return out

    def undo(self) -> None:
        """What a capture leaves: the written tensors as they were, the made ones garbage."""
        written = {id(t) for t, _ in self.before.values()}
        with torch.no_grad():
            for tensor, kept in self.before.values():
                tensor.copy_(kept)
            for call in self.graph.calls:
                for out in call.outputs:
                    if id(out) not in written and out.is_floating_point() and out._base is None:
                        out.fill_(float("nan"))


@contextlib.contextmanager
def graph(fake: FakeGraph, **_):
    """``torch.cuda.graph``: the block's kernels recorded into ``fake``, none of them run."""
    capture = _Capture(fake)
    with capture:
        yield
    capture.undo()


class _Stream:
    def wait_stream(self, other) -> None:
        pass


@contextlib.contextmanager
def _stream(s):
    yield


def install(monkeypatch) -> list[FakeGraph]:
    """Puts the fake graph API on ``torch.cuda``; the list fills with the graphs made."""
    made: list[FakeGraph] = []

    def new_graph() -> FakeGraph:
        made.append(FakeGraph())
        return made[-1]

    monkeypatch.setattr(torch.cuda, "CUDAGraph", new_graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "stream", _stream)
    monkeypatch.setattr(torch.cuda, "current_stream", _Stream)
    return made
