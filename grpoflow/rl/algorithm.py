"""What an RL algorithm is: a small object with ``update(batch, learner) -> metrics`` (:class:`Update`),
written against the learner's public contract (:mod:`grpoflow.rl.learner`), and its registration
(:class:`Algorithm`): how the update is built from the params, and the policy's learning rate. The
loop around it (rollouts, rewards, weight sync, checkpoints) is shared (:mod:`grpoflow.rl.trainer`);
the algorithm's name leads to the rest (:mod:`grpoflow.catalog`). Each algorithm's module defines
one ``ALGORITHM``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grpoflow import catalog
from grpoflow.registry import Registry

if TYPE_CHECKING:
    from grpoflow.config import Params
    from grpoflow.rl.batch import Batch
    from grpoflow.rl.inputs import TrainerInputs
    from grpoflow.rl.learner import Learner


class Update(Protocol):
    """An algorithm's update of one step's batch. It may also define ``updates_policy(step) -> bool``
    (PPO's critic warm-up leaves the policy alone: adaptive KL control then stands still)."""

    def update(self, batch: Batch, learner: Learner) -> dict[str, float]:
        """The optimizer step(s) on ``batch`` through ``learner``; the algorithm's own metrics."""
        ...


def updates_policy(update: Update, step: int) -> bool:
    """Whether ``update`` changes the policy at ``step`` (an update that does not say: always)."""
    check = getattr(update, "updates_policy", None)
    return True if check is None else bool(check(step))


@dataclass(frozen=True)
class Built:
    """What :attr:`Algorithm.build` returns: the update, and the extra engines (a critic's, say)
    checkpointed beside the policy's, by name."""

    update: Update
    engines: dict[str, Any] = field(default_factory=dict)


def shared_lr(params: Params) -> float:
    """The policy's learning rate every algorithm shares unless it has its own: ``rl.engine.lr``."""
    return params.rl.engine.lr


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm's trainer side: its name in :mod:`grpoflow.catalog` (which declares its module,
    params sections and KL coefficient), how its update is built: ``build(params, inputs,
    reference_dir) -> Built`` (``inputs``: the run's policy engine and the rest,
    ``reference_dir``: the saved SFT model, for an algorithm that starts more models from it), and
    the policy's learning rate."""

    name: str
    build: Callable[[Params, TrainerInputs, Path], Built]
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
