"""bfloat16 against fp32 on this machine, in the same run: the matmul rate of each (torch, the
threads training gets), and a GRPO step's seconds and peak RSS with the engine in each dtype
(``rl.engine.bf16``; the frozen reference follows the policy's dtype), the two alternating, each
in a process of its own:

- the tiny default (8 prompts x G=8, 16 tokens), whose matmuls are too small for bf16 to pay;
- SmolLM2-135M-Instruct (4 prompts x G=8, 64 tokens), full fine-tuning with gradient checkpointing
  and HF rollouts, and LoRA r16 with vLLM rollouts as its set runs (where its packages are installed).

A CPU with AMX or AVX512-BF16 (its flags, ``cpu_native_bf16``) multiplies bf16 in hardware;
elsewhere oneDNN emulates it and the ratios come out above 1.

    python -m benchmarks bf16
"""

from __future__ import annotations

import json
from statistics import mean

import torch

from benchmarks.bench_update_flops import SIZES, matmul_flops
from benchmarks.timing import result_of
from grpoflow.models.engine import cpu_has_native_bf16


def _step(bf16: bool, steps: int, *extra: str) -> dict:
    overrides = json.dumps({"rl.engine.bf16": bf16})
    args = ["-m", "benchmarks.grpo_step_timing", "--impl", "ours", "--steps", str(steps), "--overrides", overrides]
    return result_of([*args, *extra])


def _compare(rounds: int, steps: int, *extra: str) -> dict:
    """``rounds`` alternations of fp32 and bf16: each one's mean s/step, its phases, its peak RSS,
    and bf16's ratios to fp32."""
    runs: dict[str, list[dict]] = {"fp32": [], "bf16": []}
    for _ in range(rounds):
        for name in runs:
            runs[name].append(_step(name == "bf16", steps, *extra))
    sides = {
        name: {
            "s_per_step": round(mean(r["seconds_per_step"] for r in rs), 3),
            "completion_tokens_per_step": round(mean(r["completion_tokens_per_step"] for r in rs), 1),
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in rs)),
            "phase_s_per_step": {
                k: round(mean(r["phase_seconds_per_step"][k] for r in rs), 3) for k in rs[0]["phase_seconds_per_step"]
            },
        }
        for name, rs in runs.items()
    }
    fp32, bf16 = sides["fp32"], sides["bf16"]
    return {
        **sides,
        "bf16_over_fp32": {
            "s_per_step": round(bf16["s_per_step"] / fp32["s_per_step"], 3),
            "peak_rss": round(bf16["peak_rss_mb"] / fp32["peak_rss_mb"], 3),
        },
    }


def run(steps: int = 4, rounds: int = 2) -> dict:
    from benchmarks.models import smollm_folder

    matmul = {
        name: {n: round(matmul_flops(n, dtype=dtype) / 1e9, 1) for n in SIZES}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    result = {
        "cpu_native_bf16": cpu_has_native_bf16(),
        "threads": torch.get_num_threads(),
        "matmul_gflops": matmul,
        "matmul_bf16_over_fp32": {n: round(matmul["bf16"][n] / matmul["fp32"][n], 2) for n in SIZES},
        "tiny": _compare(rounds, steps, "--model", "tiny"),
    }
    if smollm_folder() is None:
        return {**result, "smollm2_135m": "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages"}
    smollm = ("--model", "smollm", "--warmup", "1")
    result["smollm2_135m_full"] = _compare(rounds, 2, *smollm)
    result["smollm2_135m_lora_vllm"] = _compare(rounds, 2, *smollm, "--lora", "--vllm")
    return result
