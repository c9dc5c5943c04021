"""The step-time cost of each GRPO-family option (#12), as a ratio to plain GRPO measured in the
same run: the tiny model (8 prompts x G=8, 16 completion tokens), each option alone, then DAPO's
preset. Each configuration runs in a process of its own.

The model is untrained, so nearly every group's rewards are equal: dynamic sampling then draws
up to its cap every step, and its figure is close to the cap's cost, the worst case.
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


def _seconds(overrides: dict, steps: int) -> float:
    out = result_of(["-m", "benchmarks.grpo_step_timing", "--impl", "ours", "--model", "tiny", "--steps", str(steps),
                     "--overrides", json.dumps(overrides)])
    return out["seconds_per_step"]


def run(steps: int = 8) -> dict:
    base = _seconds({}, steps)
    result = {"reference_s_per_step": round(base, 3)}
    for name, overrides in list(OPTIONS.items())[1:]:
        seconds = _seconds(overrides, steps)
        result[name] = {"s_per_step": round(seconds, 3), "over_grpo": round(seconds / base, 3)}
    return result
