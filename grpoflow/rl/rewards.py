"""The reward of a completion: a weighted sum of verifier and reward-model scores, each component's
share kept; each verifier judges the rows of its tasks (math, code)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

import verifiers
from grpoflow.config import RM_REWARD, Params, RewardConfig
from grpoflow.config.judges import judge_name
from grpoflow.data.records import BatchScorer, Rows, row_task


class Normalizer(Protocol):
    """Rescales one component's scores as they come (``rewards[].normalize``), with a state a
    resumed run restores."""

    def update_and_normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` rescaled, after the statistics took it in."""

    def state_dict(self) -> dict:
        """The statistics, as plain numbers."""

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`."""


@dataclass(frozen=True)
class RewardComponent:
    """One part of the reward, with its weight: a verifier, or a reward model. ``tasks`` are the row
    tasks it judges (None: all); other rows get 0 from it."""

    name: str
    score: BatchScorer
    weight: float
    tasks: frozenset[str] | None = None
    norm: Normalizer | None = None

    def judges(self, row: Mapping[str, Any]) -> bool:
        """Whether this component scores ``row``."""
        return self.tasks is None or row_task(row) in self.tasks


class WeightedReward:
    """``sum(weight * component score)`` over the components, each component's scores kept for logging."""

    def __init__(self, components: Sequence[RewardComponent]):
        if not components:
            raise ValueError("at least one reward component is needed")
        self.components = list(components)

    def __call__(self, completions: Sequence[str], rows: Rows) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(total (N,), {component name: scores (N,)})``."""
        parts = {c.name: self._part(c, completions, rows) for c in self.components}
        total = sum(c.weight * parts[c.name] for c in self.components)
        return total, parts

    @staticmethod
    def _part(c: RewardComponent, completions: Sequence[str], rows: Rows) -> torch.Tensor:
        """One component's scores: its own rows scored (and normalised), 0 elsewhere."""
        idx = [i for i, row in enumerate(rows) if c.judges(row)]
        out = torch.zeros(len(rows), dtype=torch.float32)
        if idx:
            got = torch.tensor(c.score([completions[i] for i in idx], [rows[i] for i in idx]), dtype=torch.float32)
            out[idx] = c.norm.update_and_normalize(got) if c.norm else got
        return out

    def state_dict(self) -> dict:
        """The running normalisers' statistics, by component."""
        return {c.name: c.norm.state_dict() for c in self.components if c.norm}

    def load_state_dict(self, state: Mapping[str, dict]) -> None:
        """Restore :meth:`state_dict` (a component missing from ``state`` starts afresh)."""
        for c in self.components:
            if c.norm and c.name in state:
                c.norm.load_state_dict(state[c.name])


class RunningNorm:
    """Scores minus their running mean, over their running standard deviation, over every score so far.

    The statistics are merged batch by batch with the parallel update of Chan, Golub & LeVeque
    (1979): for counts ``n_a, n_b``, means ``m_a, m_b`` and sums of squared deviations ``M_a, M_b``,
    ``d = m_b - m_a``, ``m = m_a + d n_b / n``, ``M = M_a + M_b + d^2 n_a n_b / n`` (Welford's update
    when ``n_b = 1``); numerically stable, unlike running sums of ``x`` and ``x^2``. The std is the
    population one, ``sqrt(M / n)``. A batch is normalised with statistics that include it, so the
    first batch is already centred and scaled.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = eps
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    @property
    def std(self) -> float:
        """The population standard deviation of every score so far (0 before any)."""
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    def update(self, x: torch.Tensor) -> None:
        """Merge the values of ``x`` into the running statistics."""
        values = x.detach().double().flatten()
        n_b = values.numel()
        if not n_b:
            return
        mean_b = float(values.mean())
        m2_b = float(((values - mean_b) ** 2).sum())
        n = self.count + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * self.count * n_b / n
        self.count = n

    def update_and_normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / (std + eps)`` with the statistics updated by ``x`` first; same dtype as ``x``."""
        self.update(x)
        return ((x.double() - self.mean) / (self.std + self.eps)).to(x.dtype)

    def state_dict(self) -> dict[str, float]:
        """The statistics, as plain numbers (JSON-friendly), for a checkpoint."""
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Continue from a :meth:`state_dict`."""
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])


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


def reward_model_scorer(params: Params, r: RewardConfig) -> BatchScorer:
    """The reward model of ``rewards`` entry ``r`` (name: rm), frozen and loaded on first use, as
    training and the verifier gate score with it."""
    from grpoflow.models.reward_model import RewardModelScorer

    return RewardModelScorer(r.model_path, params.prompt, batch_size=params.reward_model.score_batch_size)


def _component(params: Params, r: RewardConfig) -> RewardComponent:
    # Imported only where used: the verifiers alone need no transformers.
    norm = RunningNorm() if r.normalize == "running" else None
    if r.name == RM_REWARD:
        return RewardComponent(r.name, reward_model_scorer(params, r), r.weight, None, norm)
    verifier = create_verifier(params, r.name)
    return RewardComponent(r.name, verifier.score, r.weight, verifier.tasks, norm)


def build_reward(params: Params, *, models: bool = True) -> WeightedReward:
    """The reward that ``params.rewards`` describes; ``models=False``: its verifiers only (what
    ranks the samples a reward model learns from)."""
    chosen = [r for r in params.rewards if models or r.name != RM_REWARD]
    if not chosen:
        raise ValueError("rewards has no verifier: a reward model alone cannot rank the samples it learns from")
    return WeightedReward([_component(params, r) for r in chosen])


def correctness_scorer(params: Params) -> BatchScorer:
    """1.0 where a completion answers its row right, else 0.0 (the judging verifier's
    :meth:`~verifiers.Verifier.accepts`): accuracy, pass@k and maj@k use it, on any mix of tasks."""
    judges: dict[str, verifiers.Verifier] = {}

    def score(completions: Sequence[str], rows: Rows) -> list[float]:
        out = [0.0] * len(rows)
        for task in sorted({row_task(r) for r in rows}):
            if task not in judges:
                judges[task] = create_verifier(params, judge_name(params, task))
            judge = judges[task]
            idx = [i for i, r in enumerate(rows) if row_task(r) == task]
            for i, s in zip(idx, judge.score([completions[i] for i in idx], [rows[i] for i in idx])):
                out[i] = 1.0 if judge.accepts(s) else 0.0
        return out

    return score
