"""What an RL algorithm declares to :func:`grpoflow.rl.run.build_rl_run`: its params sections, its
KL coefficient and how its trainer is built. Each algorithm's module defines one ``ALGORITHM``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpoflow.config import Params
    from grpoflow.rl.trainer import PolicyTrainer, TrainerInputs


@dataclass(frozen=True)
class BuiltTrainer:
    """What :attr:`Algorithm.build` returns: the trainer, and the extra engines (a critic's, say)
    checkpointed beside the policy's, by name."""

    trainer: PolicyTrainer
    engines: dict[str, Any] = field(default_factory=dict)


def shared_lr(params: Params) -> float:
    """The policy's learning rate every algorithm shares unless it has its own: ``rl.engine.lr``."""
    return params.rl.engine.lr


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm: its name and module, its own params sections (besides the shared ``rl``),
    its KL coefficient (a reference is loaded exactly when it is > 0), how its trainer is built:
    ``build(params, inputs, reference_dir) -> BuiltTrainer`` (``reference_dir``: the saved SFT
    model, for an algorithm that starts more models from it), and the policy's learning rate."""

    name: str
    module: str
    sections: tuple[str, ...]
    kl_coef: Callable[[Params], float]
    build: Callable[[Params, TrainerInputs, Path], BuiltTrainer]
    policy_lr: Callable[[Params], float] = shared_lr
