"""Which CPU kernels a stage's arithmetic runs on, and the record of them.

torch, MKL and oneDNN pick their kernels by the CPU's widest vector instructions (AVX-512, AMX, AVX2), and
each rounds differently. Same code, seed and data then train different models on different CPU types: two
fresh clones of one commit gave an SFT model of 35.3% greedy test accuracy on an AMD EPYC (AVX-512) and one
of 30.7% on an Intel CPU with AMX. On one CPU type the digits are the same whatever the load or the thread
count (tested with 1, 2 and 8 threads). ``experiment.cpu_kernels: avx2`` holds torch's own kernels and
oneDNN to their AVX2 paths, which every x86-64 CPU of the last decade has, and MKL (torch's matrix
products) to its COMPATIBLE branch: the same digits on Intel and AMD CPUs, at the cost of the wider
kernels' speed. It works through environment variables each library reads once, at its first use, so it
is set before torch is imported (:func:`tasks.cli.run_stage_cli`); :func:`fingerprint` records what ran.

Why MKL's COMPATIBLE branch and not its AVX2 one: MKL offers its ISA branches (``MKL_CBWR=AVX2``) on
Intel processors only, and elsewhere takes its AUTO branch without a word (Intel's MKL developer guide,
"Specifying Code Branches"). So ``AVX2,STRICT`` pinned an Intel Xeon to one branch and left an AMD EPYC
on another, and two fresh clones of one commit still differed (SFT 22.4% there, 22.2% here). Measured
on the AMD EPYC: ``MKL_CBWR`` AVX2, AVX512 and AUTO train bit-identical models (the setting ignored),
while COMPATIBLE trains another, the same with 1 and 2 threads. COMPATIBLE (SSE2 without the approximate
reciprocals, whose results differ by vendor) is the branch MKL runs alike on every x86-64 processor.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, MutableMapping

# What ``avx2`` sets: ATen's dispatch (torch's own vectorised kernels), MKL's conditional numerical
# reproducibility branch (its GEMMs: the one branch MKL runs alike on Intel and AMD, see above), and
# oneDNN's instruction set (its convolutions and bf16 matmuls).
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def pin_cpu_kernels(
    setting: str, environ: MutableMapping[str, str] = os.environ, modules: Mapping[str, object] = sys.modules
) -> dict[str, str]:
    """Hold the CPU kernels to ``setting`` (``avx2``) for torch imported after this; what was set. A variable
    the user set already is kept. Nothing once torch is imported (its kernels are chosen by then: a stage run
    in-process, as the tests do); :func:`fingerprint` records what ran, as every stage's MLflow tags."""
    if setting != "avx2" or platform.machine() not in ("x86_64", "AMD64") or "torch" in modules:
        return {}
    chosen = {key: value for key, value in AVX2_ENV.items() if key not in environ}
    environ.update(chosen)
    return chosen


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string elsewhere."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fingerprint() -> dict[str, str]:
    """What a stage's arithmetic ran on: the CPU, the kernels torch dispatched to, its threads and version."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": str(torch.get_num_threads()),
        "torch": torch.__version__,
        "mkl_cbwr": os.environ.get("MKL_CBWR", "default"),
    }
