"""What an RL algorithm declares to :func:`grpoflow.rl.run.build_rl_run`: how its trainer is built and
its policy's learning rate; its name leads to the rest (:mod:`grpoflow.catalog`). Each
algorithm's module defines one ``ALGORITHM``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoflow import catalog
from grpoflow.registry import Registry

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
    """An RL algorithm's trainer side: its name in :mod:`grpoflow.catalog` (which declares its module,
    params sections and KL coefficient), how its trainer is built: ``build(params, inputs,
    reference_dir) -> BuiltTrainer`` (``reference_dir``: the saved SFT model, for an algorithm that
    starts more models from it), and the policy's learning rate."""

    name: str
    build: Callable[[Params, TrainerInputs, Path], BuiltTrainer]
    policy_lr: Callable[[Params], float] = shared_lr

    @property
    def module(self) -> str:
        """The module that defines it (its code is part of a run's fingerprint)."""
        return catalog.entry(self.name).module

    @property
    def sections(self) -> tuple[str, ...]:
        """Its own params sections, besides the shared ``rl``."""
        return catalog.entry(self.name).sections


# The algorithms by name: asking for one imports the module its catalog entry names, whose
# ``ALGORITHM = register(Algorithm(...))`` registers it (so a stage's --help needs no torch).
ALGORITHMS: Registry[Algorithm] = Registry(
    "algorithm", catalog.ALGORITHMS, "grpoflow.catalog.BUILTIN", lambda name: catalog.ALGORITHMS[name].module
)


def register(algorithm: Algorithm) -> Algorithm:
    """Register ``algorithm`` under its name (one of the catalog's); return it."""
    return ALGORITHMS.register(algorithm.name)(algorithm)
