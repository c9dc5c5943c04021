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

from verifiers.registry import default_accepts

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


# A case kind that starts so is a mutated reference program (verifiers.mutants): whether the row's
# tests fail it measures the tests, not the verifier, so it is tallied apart from the confusion matrix.
MUTANT = "mutant:"


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
    # per case kind, how many were accepted and rejected: e.g. how many of the "mutant:off_by_one"
    # mutants the tests killed, beyond the first ``max_confusions`` confusions
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    mutants: int = 0  # mutated reference programs scored, outside tp/fp/tn/fn
    mutants_killed: int = 0  # ... that the row's tests rejected

    @property
    def mutant_kill_rate(self) -> float | None:
        """Mutated reference programs the tests reject (mutation score); None without mutants. A
        survivor is a program a model could be rewarded for although it is wrong (or, rarely, one
        that behaves exactly like the reference)."""
        return self.mutants_killed / self.mutants if self.mutants else None

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
            "by_kind": {kind: dict(counts) for kind, counts in sorted(self.by_kind.items())},
            **(
                {"mutants": self.mutants, "mutant_kill_rate": round(self.mutant_kill_rate or 0.0, 6)}
                if self.mutants
                else {}
            ),
        }


def validate(
    score: Callable[[list[str], list[Mapping[str, Any]]], list[float]],
    cases: Sequence[Case],
    *,
    accepts: Callable[[float], bool] = default_accepts,
    max_confusions: int = 20,
) -> Validation:
    """Score every case and tally the confusion matrix. A case counts as accepted when ``accepts`` holds
    for its score: pass the verifier's own (``verifier.accepts``; the code verifier wants every test
    passed); the default is the registry's (a score of at least 0.5)."""
    start = time.perf_counter()
    scores = score([c.completion for c in cases], [c.row for c in cases])
    elapsed = time.perf_counter() - start
    v = Validation(checks_per_second=len(cases) / elapsed if elapsed > 0 else float("inf"))
    for case, s in zip(cases, scores):
        accepted = accepts(s)
        counts = v.by_kind.setdefault(case.kind, {"accepted": 0, "rejected": 0})
        counts["accepted" if accepted else "rejected"] += 1
        if case.kind.startswith(MUTANT):
            v.mutants += 1
            v.mutants_killed += not accepted
        elif accepted and case.expected:
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
                    "id": case.row.get("id"),
                    "expected": case.expected,
                    "score": s,
                    "reference": str(case.row.get("reference_answer", ""))[:300],
                    "completion": case.completion[:300],
                }
            )
    return v
