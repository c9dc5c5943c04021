"""The verifier self-test kit: a wrong verifier makes every later training step worthless, so the
``validate_verifiers`` gate scores, for every verifier, completions that must pass (the gold answer
in several surface forms, the gold solution) and completions that must fail (perturbed wrong
answers, malformed text, hostile code), and reports precision, recall, accuracy, the confusions and
throughput. Each verifier builds its own cases (:meth:`verifiers.registry.Verifier.gate_cases`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Texts no verifier may accept, whatever the reference.
MALFORMED = [
    "",
    "I don't know.",
    "####",
    "The answer is",
    "\\boxed{",
    "#### abc",
    "}}}{{{ \\frac{",
    "\x00\x01\x02",
    "9" * 5000 + " is not the answer? ####",
]


@dataclass(frozen=True)
class Case:
    """One gate case: a completion, the row it answers, and whether it must be accepted."""

    completion: str
    row: Mapping[str, Any]
    expected: bool
    kind: str  # e.g. "gold:comma", "wrong:off_by_one", "malformed"


def malformed_cases(rows: Sequence[Mapping[str, Any]], limit: int = 50) -> list[Case]:
    """:data:`MALFORMED` against the first ``limit`` rows: all must fail."""
    return [Case(text, row, False, "malformed") for row in rows[:limit] for text in MALFORMED]


@dataclass
class Validation:
    """A verifier's confusion matrix on its gate cases."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    checks_per_second: float = 0.0
    errors: list[str] = field(default_factory=list)
    confusions: list[dict] = field(default_factory=list)

    @property
    def precision(self) -> float:
        """Accepted cases that should be: wrong answers rejected."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        """Right answers accepted, in any surface form."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def accuracy(self) -> float:
        """Cases judged as expected."""
        total = self.tp + self.fp + self.tn + self.fn
        return (self.tp + self.tn) / total if total else 0.0

    def to_dict(self) -> dict:
        """The counts and rates, for the metrics JSON."""
        return {
            "tp": self.tp,
            "fp": self.fp,
            "tn": self.tn,
            "fn": self.fn,
            "precision": round(self.precision, 6),
            "recall": round(self.recall, 6),
            "accuracy": round(self.accuracy, 6),
            "checks_per_second": round(self.checks_per_second, 1),
            "cases": self.tp + self.fp + self.tn + self.fn,
        }


def validate(
    score: Callable[[list[str], list[Mapping[str, Any]]], list[float]],
    cases: Sequence[Case],
    *,
    max_confusions: int = 20,
) -> Validation:
    """Score every case (a score >= 0.5 counts as accepted) and tally the confusion matrix."""
    start = time.perf_counter()
    scores = score([c.completion for c in cases], [c.row for c in cases])
    elapsed = time.perf_counter() - start
    v = Validation(checks_per_second=len(cases) / elapsed if elapsed > 0 else float("inf"))
    for case, s in zip(cases, scores):
        accepted = s >= 0.5
        if accepted and case.expected:
            v.tp += 1
        elif accepted:
            v.fp += 1
        elif case.expected:
            v.fn += 1
        else:
            v.tn += 1
        if accepted != case.expected and len(v.confusions) < max_confusions:
            v.confusions.append(
                {
                    "kind": case.kind,
                    "expected": case.expected,
                    "score": s,
                    "reference": str(case.row.get("reference_answer", ""))[:300],
                    "completion": case.completion[:300],
                }
            )
    return v
