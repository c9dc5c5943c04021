"""The step-time cost of each GRPO-family option (#12), as a ratio to plain GRPO measured in the
same run: each option alone, then DAPO's preset, each configuration in a process of its own.

- The tiny model (8 prompts x G=8, 16 completion tokens) is untrained, so nearly every group's
  rewards are equal: dynamic sampling then draws up to its cap every step, and its figure is close
  to the cap's cost, the worst case.
- SmolLM2-135M-Instruct with LoRA r16 and its chat prompts (4 prompts x G=8, 64 tokens), where its
  packages are installed: a real model, whose groups are mixed often enough that dynamic sampling
  pays for the extra draws it actually needs (about 40 minutes on 2 cores).
"""

from __future__ import annotations

import json

from benchmarks.timing import result_of

OPTIONS: dict[str, dict] = {
    "grpo (reference)": {},
    "kl_estimator k1": {"grpo.kl_estimator": "k1"},
    "kl_placement reward": {"grpo.kl_placement": "reward"},
    "advantage rloo": {"grpo.advantage_estimator": "rloo"},
    "advantage reinforce_pp": {"grpo.advantage_estimator": "reinforce_pp"},
    "entropy bonus 0.01": {"rl.entropy_coef": 0.01},
    "overlong buffer 4": {"rl.overlong_buffer": 4},
    "TIS token_truncate": {"rl.rollout_correction.mode": "token_truncate"},
    "MIS sequence_mask": {"rl.rollout_correction.mode": "sequence_mask"},
    "reference refresh every step": {"rl.ref_sync_every": 1},
    "dynamic sampling (max 3 draws)": {"rl.dynamic_sampling.enabled": True, "rl.dynamic_sampling.max_draws": 3},
    "preset dapo": {"rl.preset": "dapo"},
}


def _seconds(overrides: dict, steps: int, *extra: str) -> float:
    out = result_of(
        [
            "-m",
            "benchmarks.grpo_step_timing",
            "--impl",
            "ours",
            "--steps",
            str(steps),
            "--overrides",
            json.dumps(overrides),
            *extra,
        ]
    )
    return out["seconds_per_step"]


def _costs(steps: int, *extra: str, refused: dict[str, str] | None = None) -> dict:
    """Each option's s/step over plain GRPO's; ``refused``: options this setup cannot take, and why."""
    refused = refused or {}
    base = _seconds({}, steps, *extra)
    result: dict = {"reference_s_per_step": round(base, 3)}
    for name, overrides in list(OPTIONS.items())[1:]:
        if name in refused:
            result[name] = refused[name]
            continue
        seconds = _seconds(overrides, steps, *extra)
        result[name] = {"s_per_step": round(seconds, 3), "over_grpo": round(seconds / base, 3)}
    return result


def run(steps: int = 8) -> dict:
    from benchmarks.models import smollm_folder

    result = {"tiny": _costs(steps, "--model", "tiny")}
    if smollm_folder() is None:
        return {
            **result,
            "smollm2_135m_lora": "skipped: make demo PARAMS=params/smollm2-135m.yaml installs its packages",
        }
    lora_refuses = {
        "reference refresh every step": "not with LoRA: the config check refuses it (the reference is "
        "the base without adapters)"
    }
    return {
        **result,
        "smollm2_135m_lora": _costs(2, "--model", "smollm", "--lora", "--warmup", "1", refused=lora_refuses),
    }
