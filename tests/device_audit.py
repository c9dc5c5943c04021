"""A device audit: real training passes on a stand-in accelerator, failing on any tensor that mixes
devices, on a machine without a GPU.

The tensors a model computes with are real CPU tensors wrapped in :class:`OnDevice`, which reports
the stand-in device (``lazy:0``: a type that neither this project nor its libraries special-case,
and that PyTorch's CPU build constructs without a driver). :class:`DeviceAudit`, a dispatch mode,
sees every operator:

- an operator given tensors of both kinds raises :class:`DeviceMixError`, as CUDA would ("Expected
  all tensors to be on the same device"); a 0-dim CPU tensor may join, as a scalar may on CUDA's
  element-wise operators, but not the operators CUDA refuses one in (:data:`NO_HOST_SCALARS`:
  ``cat``, ``stack``, matrix products, gathers); ``copy_`` may cross, as it does on CUDA;
- a random operator drawing with a CPU ``torch.Generator`` for a tensor on the device raises too
  (CUDA: "Expected a 'cuda' device type for generator");
- an operator asked for the stand-in device (``.to(device)``, ``torch.zeros(..., device=device)``)
  computes on the CPU and hands back :class:`OnDevice` tensors; so does any operator of on-device
  tensors; ``.cpu()`` / ``.to("cpu")`` hands back plain ones.

Everything computes for real (the numbers are the CPU's), so whole steps run: rollouts with their
data-dependent stopping, log-probs, losses, backward passes and DeepSpeed's optimizer step. Stricter
than CUDA in one way, on purpose: a CPU index into a device tensor is a mix here (CUDA copies it
over, a host-to-device sync per call).

Use :func:`audited` as a context manager; it also sets ``GRPOFLOW_DEVICE`` (the project's one place
that decides the device, :mod:`grpoflow.models.device`) and points DeepSpeed's CPU accelerator at
the stand-in, as its CUDA accelerator points at ``cuda:LOCAL_RANK``. On a machine with CUDA the audit
is CUDA itself: :func:`audited` then only sets the device.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

STAND_IN = torch.device("lazy", 0)
_CPU = torch.device("cpu")
_aten = torch.ops.aten
# The operators that take no CPU tensor at all beside CUDA ones, a 0-dim one included: those outside
# CUDA's element-wise machinery (TensorIterator), which alone lifts a CPU scalar onto the device.
NO_HOST_SCALARS = frozenset(
    {
        _aten.cat,
        _aten.stack,
        _aten.mm,
        _aten.bmm,
        _aten.addmm,
        _aten.dot,
        _aten.gather,
        _aten.scatter,
        _aten.index_select,
        _aten.embedding,
        _aten.searchsorted,
        _aten.isin,
    }
)


# The project's helpers that read for their callers: a read is the caller's.
READ_HELPERS = frozenset({"host_values", "_read"})


class DeviceMixError(RuntimeError):
    """An operator was given tensors on two devices."""


class OnDevice(torch.Tensor):
    """A CPU tensor (``elem``) that says it lives on :data:`STAND_IN`."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=STAND_IN,
            requires_grad=elem.requires_grad,
        )

    def __init__(self, elem: torch.Tensor):
        self.elem = elem

    def __repr__(self) -> str:
        return f"OnDevice({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} on a stand-in device tensor outside the device audit")


def _is_host(t, scalars_join: bool = True) -> bool:
    """A plain tensor that counts as the CPU's in a mix (a 0-dim one joins as a scalar where ``scalars_join``)."""
    return isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and (t.dim() > 0 or not scalars_join)


def _host_generator(kwargs: dict) -> bool:
    generator = kwargs.get("generator")
    return isinstance(generator, torch.Generator) and generator.device.type == "cpu"


def _unwrap(t):
    return t.elem if isinstance(t, OnDevice) else t


def _wrap(t):
    return OnDevice(t) if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) else t


def _shapes(leaves) -> str:
    return ", ".join(
        f"{'device' if isinstance(t, OnDevice) else 'cpu'} {tuple(t.shape)}"
        for t in leaves
        if isinstance(t, torch.Tensor)
    )


def _written_arguments(func, args, kwargs) -> list | None:
    """The arguments an in-place or ``out=`` operator writes and returns (None for other operators):
    such an operator must hand back the very tensors it was given."""
    schema = func._schema
    if not schema.returns:
        return None
    written = []
    for ret in schema.returns:
        alias = ret.alias_info
        if alias is None or not alias.is_write:
            return None
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.before_set == alias.before_set:
                written.append(args[i] if i < len(args) else kwargs[arg.name])
                break
        else:
            return None
    return written


# Operators whose result a host must wait for: a value read from the device, or an output whose size
# depends on the device's data. On CUDA each one stalls the host until the stream has caught up.
SYNCING = frozenset(
    {_aten._local_scalar_dense, _aten.nonzero, _aten.masked_select, _aten._unique2, _aten.unique_consecutive}
)


def reader() -> str:
    """``module:function`` of the innermost frame of the project's code on the stack: who made a read
    (a read helper of :data:`READ_HELPERS` passes it to its caller); or ``(outside grpoflow)``."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("grpoflow.") and frame.f_code.co_name not in READ_HELPERS:
            return f"{module}:{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "(outside grpoflow)"


class DeviceAudit(TorchDispatchMode):
    """The dispatch mode of the audit (see the module's docstring); ``ops`` counts operators seen on
    the stand-in device, so that a test can tell the audit saw its passes; ``syncs`` counts the
    device-to-host waits by operator (:data:`SYNCING`, copies to the host, ``tolist``), the stalls a
    GPU step pays for."""

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.syncs: Counter[str] = Counter()
        self.readers: Counter[str] = Counter()  # the same reads, by the project's function that made each

    def count(self, kind: str) -> None:
        """One read of the device, of ``kind``, counted with the function of the project that made it."""
        self.syncs[kind] += 1
        self.readers[reader()] += 1

    def _count_sync(self, func, args, kwargs) -> None:
        device_in = any(isinstance(t, OnDevice) for t in tree_flatten((args, kwargs))[0])
        if not device_in:
            return
        if func.overloadpacket in SYNCING:
            self.count(func.overloadpacket.__name__)
        elif func is _aten._to_copy.default and kwargs.get("device") is not None:
            if torch.device(kwargs["device"]).type == "cpu":
                self.count("to_host")
        elif func in (_aten.copy_.default, _aten._copy_from.default) and not isinstance(args[0], OnDevice):
            self.count("to_host")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        self._count_sync(func, args, kwargs)
        leaves, _ = tree_flatten((args, kwargs))
        on_device = any(isinstance(t, OnDevice) for t in leaves)
        crossing = func in (torch.ops.aten.copy_.default, torch.ops.aten._copy_from.default)
        scalars_join = func.overloadpacket not in NO_HOST_SCALARS
        if on_device and not crossing and any(_is_host(t, scalars_join) for t in leaves):
            raise DeviceMixError(f"{func} mixes devices: {_shapes(leaves)}")
        wanted = kwargs.get("device")
        to_device = on_device and not crossing
        if wanted is not None:
            to_device = torch.device(wanted).type == STAND_IN.type
            kwargs["device"] = _CPU
        if to_device and _host_generator(kwargs):
            raise DeviceMixError(f"{func} draws with a CPU generator for a tensor on the device: {_shapes(leaves)}")
        self.ops += int(to_device)
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        written = _written_arguments(func, args, kwargs)
        if written is not None:
            return written[0] if len(written) == 1 else tuple(written)
        return tree_map(_wrap, out) if to_device else out


class _NewTensors(TorchFunctionMode):
    """``torch.tensor(data, device=stand-in)`` (and ``as_tensor``): built on the CPU, then moved, so
    that :class:`DeviceAudit` sees the move (PyTorch builds such a tensor below the dispatch modes);
    ``tolist()`` of a stand-in tensor reads its CPU values, as CUDA's copies them over."""

    # ``memory_format`` is ignored: the audit checks placement, and the wrapped tensor's layout is the CPU's.

    def __init__(self, audit: DeviceAudit | None = None):
        super().__init__()
        self.audit = audit  # where a ``tolist`` of a device tensor is counted as a sync

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.tolist and isinstance(args[0], OnDevice):
            if self.audit is not None:
                self.audit.count("tolist")
            return args[0].elem.tolist()
        if func is torch.Tensor.new_tensor and isinstance(args[0], OnDevice):
            # Built with the tensor's options below the dispatch modes, as torch.tensor is: build it here.
            kwargs.setdefault("dtype", args[0].dtype)
            device = kwargs.pop("device", None)
            made = torch.tensor(args[1], **kwargs)
            return made.to(STAND_IN) if device is None or torch.device(device) == STAND_IN else made.to(device)
        if func is torch.Tensor.to and isinstance(args[0], OnDevice):
            # Under inference_mode PyTorch copies a tensor "to" its own device below the dispatch modes.
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args[1:], **kwargs)
            if device is None or torch.device(device) == STAND_IN:
                if dtype is None or dtype == args[0].dtype:
                    return args[0]
                return func(args[0], dtype=dtype, non_blocking=non_blocking)
        device = kwargs.get("device")
        if func in (torch.tensor, torch.as_tensor) and device is not None and torch.device(device) == STAND_IN:
            kwargs["device"] = _CPU
            return func(*args, **kwargs).to(STAND_IN)
        return func(*args, **kwargs)


@contextlib.contextmanager
def audited() -> Iterator[DeviceAudit | None]:
    """Run the block on the stand-in device under :class:`DeviceAudit` (on a CUDA machine: on
    ``cuda:0``, where CUDA itself refuses a mix; then it yields None)."""
    from grpoflow.models.device import DEVICE_ENV

    saved = os.environ.get(DEVICE_ENV)
    os.environ[DEVICE_ENV] = "cuda:0" if torch.cuda.is_available() else str(STAND_IN)
    try:
        if torch.cuda.is_available():
            yield None
            return
        with (
            _deepspeed_on_stand_in(),
            _static_decode_strict(),
            _no_autocast_on_stand_in(),
            DeviceAudit() as mode,
            _NewTensors(mode),
        ):
            yield mode
    finally:
        if saved is None:
            os.environ.pop(DEVICE_ENV, None)
        else:
            os.environ[DEVICE_ENV] = saved


def _no_autocast_on_stand_in() -> contextlib.AbstractContextManager:
    """``torch.is_autocast_enabled(device_type)`` answers False for the stand-in's type, as for any
    device without autocast: torch 2.11 (the lent GPU image's) raises "unknown device type" for it,
    and transformers asks it in every rotary embedding (torch 2.13 answers False itself)."""
    asked = torch.is_autocast_enabled

    def is_autocast_enabled(*args, **kwargs):
        device_type = args[0] if args else kwargs.get("device_type")
        return False if device_type == STAND_IN.type else asked(*args, **kwargs)

    return mock.patch.object(torch, "is_autocast_enabled", is_autocast_enabled)


def _static_decode_strict() -> contextlib.AbstractContextManager:
    """A failure of the static decode step raises under the audit instead of falling back to the
    growing cache (which would hide a device bug in the GPU's default decode path)."""
    from grpoflow.rollout import static_decode

    return mock.patch.object(static_decode, "FALL_BACK", False)


@contextlib.contextmanager
def _deepspeed_on_stand_in() -> Iterator[None]:
    """DeepSpeed's CPU accelerator naming the stand-in device, as its CUDA accelerator names
    ``cuda:LOCAL_RANK``: the engine then places the module and its buffers there itself."""
    from grpoflow.models.engine import import_deepspeed

    import_deepspeed()
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    names = {"device_name": accelerator.device_name, "current_device_name": accelerator.current_device_name}
    accelerator.device_name = lambda index=None: str(STAND_IN)
    accelerator.current_device_name = lambda: str(STAND_IN)
    # A ZeRO-3 engine built earlier in this process replaces F.linear with DeepSpeed's wrapper "until
    # manually reset" (it asks torch for the autocast state of the accelerator's device type, which a
    # stand-in has none of); the audit's engines are ZeRO-0: torch's own linear, as in a fresh stage process.
    linear = torch.nn.functional.linear
    original = getattr(linear, "__module__", "").startswith("deepspeed.") and _torch_linear()
    if original:
        torch.nn.functional.linear = original
    try:
        yield
    finally:
        for name, method in names.items():
            setattr(accelerator, name, method)
        torch.nn.functional.linear = linear


def _torch_linear():
    """torch's F.linear as DeepSpeed kept it before wrapping it (None if it kept none)."""
    from deepspeed.runtime.zero.partition_parameters import InsertPostInitMethodToModuleSubClasses

    return getattr(InsertPostInitMethodToModuleSubClasses, "linear_bk", None)
