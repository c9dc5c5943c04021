"""Which kernels the training passes run, in one line for a stage's log (issue #37): the model's
attention implementation, the backend PyTorch's ``scaled_dot_product_attention`` (SDPA) picks for
those passes, and how the log-probs are computed.

Every attention call of a training pass carries a 4-D boolean mask (left-padded rows, packed
shared-prefix groups: :mod:`grpoflow.rl.shared_prefix`). ``grpoflow_sdpa`` on CPU hands SDPA the
grouped key/value heads whole (``enable_gqa``, :mod:`grpoflow.models.attention`); on CUDA, and
``sdpa`` everywhere, transformers' function copies them to one per query head first (``repeat_kv``:
its CUDA kernels take no mask with grouped heads). SDPA then takes the first backend, in PyTorch's
priority order, whose constraints the call meets:

- CUDA: flash, mem-efficient, math, cuDNN by default (``torch._C._get_sdp_priority_order``), each
  asked with ``torch.backends.cuda.can_use_*_attention`` on an ``SDPAParams``. Flash takes no
  arbitrary mask, so a masked pass gets mem-efficient at best (bf16/fp16/fp32, head dim a multiple
  of 8), else math.
- CPU: flash (PyTorch's CPU kernel, which takes masks and grouped heads; not with dropout), then
  math. The CPU dispatcher's own choice is asked (``aten::_fused_sdp_choice``, which SDPA calls to
  pick); ``torch.backends.cuda.enable_flash_sdp(False)`` turns the CPU flash kernel off too.

:func:`describe_kernels` answers for a representative call of the model's head shapes and dtype
(PyTorch's own checks, no pass run); :func:`observed_kernels` runs one packed log-prob pass,
forward and backward, under the profiler and names the SDPA kernels that did run. ``python -m
grpoflow.rl.kernels MODEL_DIR [--bf16]`` prints both (the GPU check's step-timing part).

The log-probs are the project's chunked selective log-softmax over the model's logits
(:mod:`grpoflow.rl.logprobs`). A fused linear-cross-entropy (Liger's ``liger_kernel``) is not
wired in; the line says whether it is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from grpoflow.models.attention import NAME as OWN_ATTENTION
from grpoflow.models.device import model_device
from grpoflow.rl.shared_prefix import hf_config

SDPA_ATTENTIONS = frozenset({"sdpa", OWN_ATTENTION})  # the implementations that call torch's SDPA
NAMES = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "mem-efficient",
    SDPBackend.CUDNN_ATTENTION: "cudnn",
    SDPBackend.MATH: "math",
}
CPU_FLASH = "cpu-flash"  # PyTorch's flash-attention kernel for the CPU (not the CUDA one)
DEFAULT_ORDER = (
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
    SDPBackend.CUDNN_ATTENTION,
)
PROBE_TOKENS = 16  # the representative call's sequence length (the checks look at shapes' kinds, not sizes)
LIGER = "liger_kernel"
# Profiler op names of SDPA's kernels (forward and backward), by the backend they belong to.
_OPS: tuple[tuple[str, str], ...] = (
    ("flash_attention_for_cpu", CPU_FLASH),
    ("flash", "flash"),
    ("efficient", "mem-efficient"),
    ("cudnn", "cudnn"),
    ("math", "math"),
    ("overrideable", "overrideable"),
)


@dataclass(frozen=True)
class KernelReport:
    """What a model's training passes run: its attention implementation, SDPA's backend for them
    (None where the attention does not call SDPA), the dtype asked about, and the log-probs' kernel."""

    attention: str
    sdpa: str | None
    dtype: str
    logprobs: str

    def line(self) -> str:
        """One short line: ``attention: grpoflow_sdpa -> sdpa cpu-flash (float32); log-probs: ...``."""
        attention = f"attention: {self.attention}"
        if self.sdpa is not None:
            attention += f" -> sdpa {self.sdpa} ({self.dtype})"
        elif self.attention == "eager":
            attention += " (no sdpa kernel: matmul and softmax)"
        return f"{attention}; log-probs: {self.logprobs}"


def describe_kernels(
    model: torch.nn.Module, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> KernelReport:
    """What ``model``'s training passes run (see the module's docstring), on ``device`` in ``dtype``
    (default: where the model's parameters are, in their floating dtype)."""
    config = hf_config(model)
    attention = str(getattr(config, "_attn_implementation", None) or "unknown")
    device = torch.device(device) if device is not None else model_device(model)
    dtype = dtype or next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    sdpa = None
    if attention in SDPA_ATTENTIONS:
        try:
            sdpa = sdpa_backend(config, attention, device, dtype)
        except (AttributeError, RuntimeError, TypeError, ValueError) as exc:  # a line to print, never a stop
            sdpa = f"(backend not determined: {type(exc).__name__}: {exc})"[:120]
    return KernelReport(attention, sdpa, str(dtype).removeprefix("torch."), logprobs_kernel())


def sdpa_backend(config, attention: str, device: torch.device, dtype: torch.dtype) -> str:
    """The backend SDPA picks for a masked training-pass call of ``config``'s heads on ``device``."""
    grouped = attention == OWN_ATTENTION and device.type == "cpu"  # enable_gqa; else repeat_kv'd
    q, k, v, mask = probe(config, device, dtype, grouped)
    dropout = float(getattr(config, "attention_dropout", 0.0) or 0.0)
    gqa = q.shape[1] != k.shape[1]
    if device.type == "cuda":
        return cuda_backend(torch.backends.cuda.SDPAParams(q, k, v, mask, dropout, False, gqa))
    if device.type == "cpu":
        return cpu_backend(q, k, v, mask, dropout, gqa)
    return f"(backend not determined on {device.type})"


def probe(config, device: torch.device, dtype: torch.dtype, grouped: bool) -> tuple[torch.Tensor, ...]:
    """``(query, key, value, mask)`` as a training pass hands them to SDPA: (1, heads, L, head dim),
    needing gradients, with a causal boolean (1, 1, L, L) mask."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads) if grouped else heads
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)

    def states(n: int) -> torch.Tensor:
        return torch.zeros(1, n, PROBE_TOKENS, head_dim, device=device, dtype=dtype, requires_grad=True)

    mask = torch.ones(PROBE_TOKENS, PROBE_TOKENS, dtype=torch.bool, device=device).tril()
    return states(heads), states(kv_heads), states(kv_heads), mask.view(1, 1, PROBE_TOKENS, PROBE_TOKENS)


def priority_order() -> tuple[SDPBackend, ...]:
    """SDPA's backends in the order CUDA tries them (PyTorch's setting, else its default)."""
    try:
        return tuple(SDPBackend(int(b)) for b in torch._C._get_sdp_priority_order())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return DEFAULT_ORDER


def cuda_backend(params) -> str:
    """The first backend, in :func:`priority_order`, that ``torch.backends.cuda`` says can run
    ``params`` (an ``SDPAParams``); math only while it is enabled."""
    cuda = torch.backends.cuda
    checks = {
        SDPBackend.FLASH_ATTENTION: lambda: cuda.can_use_flash_attention(params),
        SDPBackend.EFFICIENT_ATTENTION: lambda: cuda.can_use_efficient_attention(params),
        SDPBackend.CUDNN_ATTENTION: lambda: cuda.can_use_cudnn_attention(params),
        SDPBackend.MATH: cuda.math_sdp_enabled,
    }
    for backend in priority_order():
        check = checks.get(backend)
        if check is not None and check():
            return NAMES[backend]
    return "none (every backend refuses it)"


def cpu_backend(q, k, v, mask, dropout: float, gqa: bool) -> str:
    """The backend the CPU dispatcher picks for this call (``aten::_fused_sdp_choice``)."""
    try:
        chosen = int(torch.ops.aten._fused_sdp_choice(q, k, v, mask, dropout, False, enable_gqa=gqa))
    except (AttributeError, RuntimeError, TypeError) as exc:
        return f"(backend not reported by torch {torch.__version__}: {type(exc).__name__})"
    if chosen == int(SDPBackend.FLASH_ATTENTION):
        return CPU_FLASH
    return NAMES.get(SDPBackend(chosen), f"backend {chosen}")


def logprobs_kernel() -> str:
    """How the log-probs are computed, and whether Liger's fused linear-cross-entropy is installed."""
    try:
        liger = importlib.util.find_spec(LIGER) is not None
    except (ImportError, ValueError):  # a package blocked as absent (None in sys.modules)
        liger = False
    state = "installed, not used" if liger else "not installed"
    return f"grpoflow chunked log-softmax ({LIGER} {state})"


def observed_kernels(model: torch.nn.Module, *, group: int = 4, prompt: int = 8, completion: int = 8) -> list[str]:
    """The SDPA kernels (backend names, as :class:`KernelReport` has them) that ran in one packed
    shared-prefix log-prob pass of ``model``, forward and backward where it needs gradients: one
    prompt, ``group`` completions of different lengths. The model's gradients are dropped after."""
    from torch.profiler import ProfilerActivity, profile

    from grpoflow.rl.logprobs import completion_logprobs

    device = model_device(model)
    gen = torch.Generator().manual_seed(0)
    config: Any = hf_config(model)
    vocab = int(config.vocab_size)
    ids = torch.randint(2, vocab, (group, prompt + completion), generator=gen)
    ids[:, :prompt] = ids[0, :prompt]  # one shared prompt
    lengths = completion - torch.arange(group) % completion  # right-padded
    mask = torch.cat([torch.ones(group, prompt), torch.arange(completion) < lengths.unsqueeze(1)], dim=1).long()
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.enable_grad():
        logp, _ = completion_logprobs(model, ids.to(device), mask.to(device), prompt)
        if logp.requires_grad:
            (logp * mask[:, prompt:].to(device)).sum().backward()
    model.zero_grad(set_to_none=True)
    return sorted({name for event in prof.events() if (name := _backend_of(event.name))})


def _backend_of(op: str) -> str | None:
    """The backend an SDPA kernel's profiler op name belongs to (None for any other op)."""
    if not op.startswith("aten::_scaled_dot_product_"):
        return None
    return next((name for key, name in _OPS if key in op), None)


def main(argv: list[str] | None = None) -> int:
    """Print ``KERNELS {json}``: :func:`describe_kernels`' line and :func:`observed_kernels`' answer
    for the model in a folder, loaded as a stage loads it, on the process's device."""
    from grpoflow.models.modeling import load_pretrained

    parser = argparse.ArgumentParser(
        prog="python -m grpoflow.rl.kernels", description="Which kernels a model's training passes run."
    )
    parser.add_argument("model", help="a Hugging Face checkpoint folder")
    parser.add_argument("--bf16", action="store_true", help="in bfloat16 (as a bf16 engine trains)")
    args = parser.parse_args(argv)
    model, _ = load_pretrained(args.model, dtype=torch.bfloat16 if args.bf16 else torch.float32)
    report = describe_kernels(model.train())
    found = {"line": report.line(), "device": str(model_device(model)), "sdpa": report.sdpa}
    print("KERNELS " + json.dumps(found | {"ran": observed_kernels(model)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
