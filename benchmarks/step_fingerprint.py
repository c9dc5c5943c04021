"""A refactor's check that the numbers did not move: three RL steps of a tiny model under each of
many options (GRPO's and PPO's), every metric written as ``repr`` (all its digits) and a hash of
the trained weights, to a JSON file. Run it on two commits and compare the files byte for byte:

    python -m benchmarks.step_fingerprint /tmp/before.json   # on the old commit
    python -m benchmarks.step_fingerprint /tmp/after.json    # on the new one
    cmp /tmp/before.json /tmp/after.json

The same machine and thread count for both (CPU kernels differ between machines, not between runs);
timings and memory are left out. Not a benchmark: ``make bench`` does not run it."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from grpoflow.config import set_dotted, validate_params
from grpoflow.rl.algorithm import ALGORITHMS
from grpoflow.rl.run import build_rl_run
from tests.unit import rl_workspace

BASE: dict[str, Any] = {
    "rl": {
        "steps": 3,
        "prompts_per_step": 4,
        "num_generations": 2,
        "checkpoint_every": 100,
        "eval_every": 100,
        "sampling": {"max_completion_length": 6},
        "engine": {"micro_batch_size": 2, "lr": 0.01},
    }
}
# Each an algorithm and the dotted overrides that take another path through the update.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "grpo_mu2_bnpo": ("grpo", {"rl.num_iterations": 2, "rl.aggregation": "bnpo"}),
    "grpo_reward_kl": ("grpo", {"grpo.kl_placement": "reward"}),
    "grpo_dr": ("grpo", {"rl.aggregation": "dr_grpo", "rl.num_iterations": 2, "grpo.advantage_estimator": "dr_grpo"}),
    "grpo_token_mask": (
        "grpo",
        {"rl.rollout_correction.mode": "token_mask", "rl.rollout_correction.cap": 1.5, "rl.aggregation": "bnpo"},
    ),
    "grpo_seq_truncate_mu2": ("grpo", {"rl.rollout_correction.mode": "sequence_truncate", "rl.num_iterations": 2}),
    "grpo_dynamic_overlong": (
        "grpo",
        {
            "rl.dynamic_sampling.enabled": True,
            "rl.dynamic_sampling.max_draws": 2,
            "rl.overlong_buffer": 3,
            "rl.entropy_coef": 0.01,
        },
    ),
    "grpo_token_budget": ("grpo", {"rl.engine.max_tokens_per_micro_batch": 40, "rl.aggregation": "bnpo"}),
    "ppo_warmup_epochs": ("ppo", {"ppo.critic_warmup_steps": 1, "ppo.critic_epochs": 2, "rl.num_iterations": 2}),
    "ppo_bnpo_mask": (
        "ppo",
        {"ppo.critic_warmup_steps": 0, "rl.aggregation": "bnpo", "rl.rollout_correction.mode": "token_mask"},
    ),
}
TIMED = ("second", "per_s", "memory", "phase/", "_s")  # left out: they differ between runs


def with_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of the raw set ``base`` with each dotted key of ``overrides`` set."""
    raw = copy.deepcopy(base)
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    return raw


def _reward(completions: list[str], rows: list[dict]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A reward that varies within groups (lengths), so that every option has advantages to act on."""
    total = [((len(c) * 7 + int(r["reference_answer"])) % 5) / 4 for c, r in zip(completions, rows)]
    return torch.tensor(total), {"length": torch.tensor([len(c) % 3 / 2 for c in completions])}


def fingerprint(name: str, workspace: Path) -> dict[str, Any]:
    """Variant ``name``'s three steps: each step's metrics (``repr``) and the trained weights' hash."""
    algorithm, overrides = VARIANTS[name]
    torch.manual_seed(0)
    params = validate_params(with_overrides(BASE, overrides))
    run = build_rl_run(params, ALGORITHMS[algorithm], data_dir=workspace / "data", reference_dir=workspace / "ref")
    getattr(run.trainer, "batches", run.trainer).reward = _reward  # the loop draws the batch (before #52: itself)
    steps = []
    for step in range(3):
        metrics = run.trainer.step(step)
        steps.append({k: repr(v) for k, v in sorted(metrics.items()) if not any(t in k for t in TIMED)})
    digest = hashlib.sha256()
    for engine in [run.engine, *run.engines.values()]:
        for key, weight in engine.module.named_parameters():
            digest.update(key.encode() + weight.detach().float().numpy().tobytes())
    return {"steps": steps, "weights": digest.hexdigest()[:16]}


def main(out: str) -> None:
    workspace = rl_workspace.build(Path(tempfile.mkdtemp()))
    found = {name: fingerprint(name, workspace) for name in VARIANTS}
    Path(out).write_text(json.dumps(found, indent=1))
    print(f"wrote {out}: {len(found)} variants, " + ", ".join(f"{k} {v['weights']}" for k, v in found.items()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "step_fingerprint.json")
