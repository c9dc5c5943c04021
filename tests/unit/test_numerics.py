"""The CPU kernels a stage runs on (grpoflow/numerics.py): pinned before torch is imported, the user's own
choice kept, and too late once torch is in the process."""

from __future__ import annotations

import platform

import pytest

from grpoflow import numerics


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the avx2 kernels are x86-64's")
def test_avx2_sets_each_librarys_variable_and_keeps_the_users():
    environ = {"MKL_CBWR": "AUTO"}
    chosen = numerics.pin_cpu_kernels("avx2", environ, modules={})  # a process that has not imported torch
    assert chosen == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert environ["MKL_CBWR"] == "AUTO"  # the user's, kept
    # MKL's ISA branches are Intel's only (AUTO elsewhere, silently): the vendor-neutral one is pinned.
    assert numerics.pin_cpu_kernels("avx2", environ := {}, modules={})["MKL_CBWR"] == "COMPATIBLE"
    assert numerics.pin_cpu_kernels("native", environ := {}, modules={}) == {} and environ == {}


def test_nothing_once_torch_is_imported_and_the_record_says_what_ran():
    import torch

    environ: dict[str, str] = {}
    assert numerics.pin_cpu_kernels("avx2", environ) == {} and environ == {}
    record = numerics.fingerprint()
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(record) == {"cpu", "cpu_capability", "threads", "torch", "mkl_cbwr"} and record["cpu"]
