"""The reward model on held-out pairs: its pairwise accuracy and the distribution of its margins
``r(chosen) - r(rejected)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grpoflow.data.pairs import EncodedPair
from grpoflow.models.reward_model import pair_scores


@dataclass(frozen=True)
class PairwiseEval:
    """Held-out pairwise results: ``summary`` for metrics, ``margins`` (``r_c - r_r`` per pair) for plots."""

    summary: dict[str, float]
    margins: list[float] = field(repr=False)


def margin_summary(margins: Sequence[float]) -> dict[str, float]:
    """Accuracy (share of margins > 0; a tie counts as wrong), mean, population std and the 10th,
    50th and 90th percentiles (linear interpolation) of the margins; NaN statistics when there are none."""
    import torch

    n = len(margins)
    if not n:
        nan = float("nan")
        return {"pairs": 0, "accuracy": nan, "margin_mean": nan, "margin_std": nan, "p10": nan, "p50": nan, "p90": nan}
    m = torch.tensor(list(margins), dtype=torch.float64)
    q = torch.quantile(m, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {
        "pairs": n,
        "accuracy": float((m > 0).double().mean()),
        "margin_mean": float(m.mean()),
        "margin_std": float(m.std(correction=0)),
        "p10": q[0],
        "p50": q[1],
        "p90": q[2],
    }


def pairwise_eval(model: Any, encoded: Sequence[EncodedPair], pad_id: int, batch_size: int = 32) -> PairwiseEval:
    """Score held-out pairs (``batch_size`` pairs a forward pass) without gradients; the model's
    train/eval mode is restored after."""
    import torch

    was_training = model.training
    model.eval()
    margins: list[float] = []
    try:
        with torch.inference_mode():
            for lo in range(0, len(encoded), batch_size):
                r_c, r_r = pair_scores(model, encoded[lo : lo + batch_size], pad_id)
                margins += (r_c - r_r).tolist()
    finally:
        model.train(was_training)
    return PairwiseEval(margin_summary(margins), margins)
