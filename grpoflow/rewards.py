"""The reward of a completion: a weighted sum of verifier scores, with each verifier's share kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import verifiers
from grpoflow.config import Params

Rows = Sequence[Mapping[str, Any]]
BatchScorer = Callable[[Sequence[str], Rows], list[float]]  # (completions, their task rows) -> scores


@dataclass(frozen=True)
class RewardComponent:
    """One verifier of the reward, with its weight."""

    name: str
    score: BatchScorer
    weight: float


class WeightedReward:
    """``sum(weight * verifier score)`` over the components, each component's scores kept for logging."""

    def __init__(self, components: Sequence[RewardComponent]):
        if not components:
            raise ValueError("at least one reward component is needed")
        self.components = list(components)

    def __call__(self, completions: Sequence[str], rows: Rows) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(total (N,), {verifier name: scores (N,)})``."""
        parts = {c.name: torch.tensor(c.score(completions, rows), dtype=torch.float32) for c in self.components}
        total = sum(c.weight * parts[c.name] for c in self.components)
        return total, parts


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, penalty: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), times ``penalty``: 0 up to
    ``max_length - buffer`` tokens, then falling linearly to ``-penalty`` at ``max_length`` (and
    below it beyond). A completion cut at the cap gets the whole penalty."""
    if not 0 < buffer < max_length:
        raise ValueError(f"the overlong buffer must be in (0, {max_length}) tokens, got {buffer}")
    excess = (lengths.float() - (max_length - buffer)).clamp(min=0)
    return -penalty * (excess / buffer).clamp(max=1.0)


def create_verifier(params: Params, name: str, *, workers: int = 1) -> verifiers.Verifier:
    """Verifier ``name`` with the options its ``rewards`` entry gives (defaults if it has none),
    the run's sandbox limits, and ``workers`` processes for CPU-heavy checks."""
    options = next((r.options for r in params.rewards if r.name == name), {})
    return verifiers.create(name, options, sandbox=params.sandbox, workers=workers)


def build_reward(params: Params) -> WeightedReward:
    """The reward that ``params.rewards`` describes."""
    return WeightedReward(
        [RewardComponent(r.name, create_verifier(params, r.name).score, r.weight) for r in params.rewards]
    )


def correctness_scorer(params: Params) -> BatchScorer:
    """The verifier that says whether an answer is right (``evaluate.verifier``): accuracy, pass@k
    and maj@k use it."""
    return create_verifier(params, params.evaluate.verifier or params.rewards[0].name).score
