"""What a run's loop and its algorithm's update are built from (:class:`TrainerInputs`), filled by
:func:`grpoflow.rl.run.build_rl_run`: its own module, so that the algorithm's registration
(:mod:`grpoflow.rl.algorithm`) and the loop (:mod:`grpoflow.rl.trainer`) both name it without
naming each other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grpoflow.config import RLConfig
from grpoflow.models.prompting import Prompter
from grpoflow.rl.health import HealthMonitor
from grpoflow.rl.rewards import WeightedReward
from grpoflow.rollout import RolloutEngine


@dataclass
class TrainerInputs:
    """What every algorithm's run is built from (:func:`grpoflow.rl.run.build_rl_run` fills it):
    the ``rl`` section, the policy's engine, the frozen reference (present exactly when the run
    needs one, :func:`grpoflow.rl.run.needs_reference`), the rollout engine, the reward and the
    train prompts; ``seed`` orders prompts and sampling; ``rank``/``world`` shard them."""

    cfg: RLConfig
    engine: Any  # a DeepSpeed engine
    ref_model: torch.nn.Module | None
    rollout: RolloutEngine
    tokenizer: Any
    reward: WeightedReward
    prompts: Sequence[dict]
    seed: int
    prompter: Prompter | None = None
    rank: int = 0
    world: int = 1
    health: HealthMonitor | None = None
