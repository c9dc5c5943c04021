"""The reward of a completion: a weighted sum of verifier scores, with each verifier's share kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

import verifiers
from grpoflow.config import Params
from verifiers.math import score_batch

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


def _scorer(name: str) -> BatchScorer:
    if name == "math":
        return lambda completions, rows: score_batch(completions, [r["reference_answer"] for r in rows], workers=1)
    fn = verifiers.get(name)
    return lambda completions, rows: [fn(c, r["reference_answer"]) for c, r in zip(completions, rows)]


def build_reward(params: Params) -> WeightedReward:
    """The reward that ``params.rewards`` describes."""
    return WeightedReward([RewardComponent(r.name, _scorer(r.name), r.weight) for r in params.rewards])


def correctness_scorer(params: Params) -> BatchScorer:
    """The verifier that says whether an answer is right: accuracy, pass@k and maj@k use it."""
    return _scorer("math")
