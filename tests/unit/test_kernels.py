"""Which kernels the training passes run (grpoflow.rl.kernels): the attention read from the model,
the SDPA backend PyTorch picks on CPU (checked against what a packed pass ran) and on CUDA (its
``can_use_*`` checks faked here), the log-probs' line with and without Liger, and the GPU check's line."""

from __future__ import annotations

import json
import types

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks import gpu_parts
from grpoflow.models.attention import NAME
from grpoflow.models.modeling import save_pretrained, train_tokenizer
from grpoflow.rl import kernels
from tests.unit.test_rollout import WORDS
from tests.unit.test_shared_prefix import VOCAB, small_llama, tiny_default

NO_LIGER = "log-probs: grpoflow chunked log-softmax (liger_kernel not installed)"


@pytest.fixture(autouse=True)
def _no_liger(monkeypatch):
    """This image has no liger_kernel; the tests that want it present say so."""
    _liger(monkeypatch, present=False)


def _liger(monkeypatch, present: bool) -> None:
    real = kernels.importlib.util.find_spec

    def find_spec(name, *args, **kw):
        if name == kernels.LIGER:
            return types.SimpleNamespace(name=name) if present else None
        return real(name, *args, **kw)

    monkeypatch.setattr(kernels.importlib.util, "find_spec", find_spec)


def eager() -> torch.nn.Module:
    model = small_llama(lora=False, attention="sdpa")
    model.set_attn_implementation("eager")
    return model


@pytest.mark.parametrize(
    ("build", "attention"),
    [(tiny_default, NAME), (lambda: small_llama(lora=False, attention="sdpa"), "sdpa"), (eager, "eager")],
)
def test_the_attention_is_read_from_the_model(build, attention):
    report = kernels.describe_kernels(build())
    assert report.attention == attention and report.dtype == "float32"
    if attention == "eager":
        assert report.sdpa is None
        assert report.line() == f"attention: eager (no sdpa kernel: matmul and softmax); {NO_LIGER}"
    else:
        assert report.line() == f"attention: {attention} -> sdpa cpu-flash (float32); {NO_LIGER}"


def test_the_attention_is_found_under_wrappers():
    wrapped = types.SimpleNamespace(module=small_llama(lora=True), parameters=lambda: iter(()))
    assert kernels.describe_kernels(wrapped, device="cpu").attention == NAME  # a DeepSpeed engine over peft


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cpu_the_answer_is_the_kernel_that_a_packed_pass_runs(dtype):
    model = small_llama(lora=True).to(dtype)  # grouped heads, LoRA: as a policy trains
    report = kernels.describe_kernels(model)
    assert report.sdpa == kernels.CPU_FLASH and report.dtype == str(dtype).removeprefix("torch.")
    assert kernels.observed_kernels(model) == [kernels.CPU_FLASH]
    with sdpa_kernel([SDPBackend.MATH]):  # the CPU flash kernel off: both say math
        assert kernels.describe_kernels(model).sdpa == "math" and kernels.observed_kernels(model) == ["math"]
    assert kernels.observed_kernels(eager()) == []  # no SDPA at all
    assert all(p.grad is None for p in model.parameters())  # the probe's gradients are dropped


def test_a_config_without_a_head_count_is_said_not_a_crash():
    config = types.SimpleNamespace(model_type="other", _attn_implementation="sdpa")
    model = types.SimpleNamespace(config=config, parameters=lambda: iter(()))
    assert kernels.describe_kernels(model, device="cpu").sdpa.startswith("(backend not determined: AttributeError")


def test_on_cpu_attention_dropout_rules_out_the_flash_kernel():
    model = small_llama(lora=False)
    model.config.attention_dropout = 0.1
    assert kernels.describe_kernels(model).sdpa == "math"


def _params(heads: int = 4, kv_heads: int = 4):
    q = torch.zeros(1, heads, 8, 32)
    kv = torch.zeros(1, kv_heads, 8, 32)
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool)
    return torch.backends.cuda.SDPAParams(q, kv, kv, mask, 0.0, False, heads != kv_heads)


def _fake_cuda(monkeypatch, flash: bool, efficient: bool, cudnn: bool = False, math: bool = True) -> list:
    seen: list = []
    cuda = torch.backends.cuda
    monkeypatch.setattr(cuda, "can_use_flash_attention", lambda p, debug=False: seen.append(p) or flash)
    monkeypatch.setattr(cuda, "can_use_efficient_attention", lambda p, debug=False: seen.append(p) or efficient)
    monkeypatch.setattr(cuda, "can_use_cudnn_attention", lambda p, debug=False: seen.append(p) or cudnn)
    monkeypatch.setattr(cuda, "math_sdp_enabled", lambda: math)
    return seen


@pytest.mark.parametrize(
    ("flash", "efficient", "cudnn", "math", "expected"),
    [
        (True, True, False, True, "flash"),
        (False, True, False, True, "mem-efficient"),
        (False, False, True, True, "math"),  # cuDNN comes after math in PyTorch's default order
        (False, False, True, False, "cudnn"),
        (False, False, False, False, "none (every backend refuses it)"),
    ],
)
def test_on_cuda_the_first_backend_that_can_run_the_call_is_named(monkeypatch, flash, efficient, cudnn, math, expected):
    _fake_cuda(monkeypatch, flash, efficient, cudnn, math)
    assert kernels.cuda_backend(_params()) == expected


def test_on_cuda_pytorchs_priority_order_is_followed(monkeypatch):
    _fake_cuda(monkeypatch, flash=True, efficient=True)
    order = [int(SDPBackend.EFFICIENT_ATTENTION), int(SDPBackend.FLASH_ATTENTION), int(SDPBackend.MATH)]
    monkeypatch.setattr(torch._C, "_get_sdp_priority_order", lambda: order)
    assert kernels.cuda_backend(_params()) == "mem-efficient"


def test_on_cuda_the_line_names_the_backend_for_the_passes_call(monkeypatch):
    seen = _fake_cuda(monkeypatch, flash=False, efficient=True)
    built = []
    probe = kernels.probe

    def on_cpu(config, device, dtype, grouped):
        built.append((device.type, grouped))
        return probe(config, torch.device("cpu"), dtype, grouped)

    monkeypatch.setattr(kernels, "probe", on_cpu)
    line = kernels.describe_kernels(small_llama(lora=False), device="cuda", dtype=torch.bfloat16).line()
    assert line == f"attention: {NAME} -> sdpa mem-efficient (bfloat16); {NO_LIGER}"
    assert built == [("cuda", False)]  # on CUDA the grouped heads are repeated (transformers' sdpa)
    params = seen[0]
    assert params.query.shape == params.key.shape == (1, 4, kernels.PROBE_TOKENS, 32) and not params.enable_gqa
    assert params.attn_mask.dtype == torch.bool and params.attn_mask.dim() == 4 and params.query.requires_grad
    assert params.query.dtype == torch.bfloat16 and params.dropout == 0.0 and not params.is_causal


@pytest.mark.parametrize("present", [True, False])
def test_the_log_probs_line_says_whether_liger_is_installed(monkeypatch, present):
    _liger(monkeypatch, present)
    expected = "installed, not used" if present else "not installed"
    assert kernels.logprobs_kernel() == f"grpoflow chunked log-softmax (liger_kernel {expected})"
    assert kernels.describe_kernels(tiny_default()).line().endswith(f"(liger_kernel {expected})")


def test_the_probe_command_prints_the_line_and_what_ran(tmp_path, capsys):
    save_pretrained(tiny_default("sdpa"), train_tokenizer([" ".join(WORDS)] * 20, VOCAB), tmp_path)
    assert kernels.main([str(tmp_path), "--bf16"]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("KERNELS ")]
    found = json.loads(out[-1].removeprefix("KERNELS "))
    assert found == {
        "line": f"attention: {NAME} -> sdpa cpu-flash (bfloat16); {NO_LIGER}",
        "device": "cpu",
        "sdpa": "cpu-flash",
        "ran": ["cpu-flash"],
    }


def test_the_gpu_checks_step_timing_part_reports_the_kernels(monkeypatch, tmp_path):
    found = {"line": "attention: grpoflow_sdpa -> sdpa mem-efficient (bfloat16); log-probs: x", "device": "cuda:0"}
    output = "noise\nKERNELS " + json.dumps(found | {"sdpa": "mem-efficient", "ran": ["mem-efficient"]}) + "\n"
    calls = []
    monkeypatch.setattr(gpu_parts, "run_part", lambda name, cmd, plan, timeout: calls.append(cmd) or ({}, output))
    kernels_part = gpu_parts.run_kernels(gpu_parts.Plan(False, tmp_path, tmp_path, {}), tmp_path / "smollm2")
    assert calls[0][1:] == ["-m", "grpoflow.rl.kernels", str(tmp_path / "smollm2"), "--bf16"]
    lines = gpu_parts.detail_lines("step_timing", {"ok": False, "kernels": kernels_part})
    assert lines == [
        "    kernels (ours, bf16 on cuda:0): attention: grpoflow_sdpa -> sdpa mem-efficient (bfloat16); "
        "log-probs: x; a packed pass ran sdpa mem-efficient"
    ]
    monkeypatch.setattr(gpu_parts, "run_part", lambda *a, **kw: ({"error": "exit 1"}, "Traceback ..."))
    failed = gpu_parts.run_kernels(gpu_parts.Plan(False, tmp_path, tmp_path, {}), tmp_path)
    assert gpu_parts.kernel_line(failed) == "    kernels: not reported (exit 1)"
