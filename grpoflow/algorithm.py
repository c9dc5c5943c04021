"""What an RL algorithm declares to :func:`grpoflow.rl_run.build_rl_run`: its params sections, its
KL coefficient and how its trainer is built. Each algorithm's module defines one ``ALGORITHM``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpoflow.config import Params
    from grpoflow.rl import PolicyTrainer


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm: its name and module, its own params sections (besides the shared ``rl``),
    its KL coefficient (a reference is loaded exactly when it is > 0), and how its trainer is
    built: ``build(params, args, kwargs, engine=, reference_dir=) -> (trainer, extra engines)``."""

    name: str
    module: str
    sections: tuple[str, ...]
    kl_coef: Callable[[Params], float]
    build: Callable[..., tuple[PolicyTrainer, dict]]
