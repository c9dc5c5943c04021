"""The reward of a completion: a weighted sum of verifier scores, with each verifier's share kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

BatchVerifier = Callable[[Sequence[str], Sequence[str]], list[float]]


@dataclass(frozen=True)
class RewardComponent:
    name: str
    score: BatchVerifier  # (completions, references) -> scores
    weight: float


class WeightedReward:
    def __init__(self, components: Sequence[RewardComponent]):
        if not components:
            raise ValueError("at least one reward component is needed")
        self.components = list(components)

    def __call__(self, completions: Sequence[str], references: Sequence[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(total (N,), {verifier name: scores (N,)})``."""
        parts = {c.name: torch.tensor(c.score(completions, references), dtype=torch.float32) for c in self.components}
        total = sum(c.weight * parts[c.name] for c in self.components)
        return total, parts
