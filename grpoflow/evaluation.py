"""Greedy exact-match accuracy of a policy on prompts with reference answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from grpoflow.prompting import format_prompt
from grpoflow.rewards import BatchVerifier
from grpoflow.rollout import RolloutEngine, Sampling


@dataclass
class EvalResult:
    accuracy: float
    outputs: list[dict]


def greedy_accuracy(
    engine: RolloutEngine, rows: Sequence[dict], score: BatchVerifier, *, max_new_tokens: int, seed: int = 0
) -> EvalResult:
    """Share of ``rows`` (dicts with ``prompt`` and ``reference_answer``) answered right greedily."""
    prompts = [format_prompt(r["prompt"]) for r in rows]
    rollouts = engine.generate(prompts, 1, Sampling(temperature=0.0, max_new_tokens=max_new_tokens), seed)
    refs = [r["reference_answer"] for r in rows]
    scores = score(rollouts.texts, refs)
    outputs = [{"id": r["id"], "completion": t, "reference": ref, "correct": s >= 0.5}
               for r, t, ref, s in zip(rows, rollouts.texts, refs, scores)]
    return EvalResult(sum(o["correct"] for o in outputs) / max(len(outputs), 1), outputs)
