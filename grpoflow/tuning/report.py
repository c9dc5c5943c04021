"""The tuning report (reports/tune.md): per arm its search space, its budget and what it spent,
every trial with its settings, state and val accuracy, and the best settings written as its overlay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grpoflow.config import Dim
from grpoflow.tuning.budget import Budget
from grpoflow.tuning.space import describe


@dataclass(frozen=True)
class TrialRow:
    """One finished trial: its number, state (complete, pruned, failed), the steps it trained, its
    final val accuracy (complete) or its last one (pruned), and its settings."""

    number: int
    state: str
    steps: int
    value: float | None
    settings: dict[str, Any]


@dataclass(frozen=True)
class ArmTuning:
    """One arm's tuning as it stands: its study, space, budget, trials, best trial and overlay."""

    arm: str
    algorithm: str
    study: str
    space: dict[str, Dim]
    budget: Budget
    eval_every: int
    trials: list[TrialRow] = field(default_factory=list)
    overlay: str | None = None
    seconds: float = 0.0  # this call's wall time on the arm (resumed trials ran earlier)

    @property
    def spent(self) -> int:
        """Training steps its trials took, pruned ones their part."""
        return sum(t.steps for t in self.trials)

    @property
    def best(self) -> TrialRow | None:
        """The complete trial with the highest val accuracy (the first of equals), if any."""
        done = [t for t in self.trials if t.state == "complete" and t.value is not None]
        return max(done, key=lambda t: (t.value, -t.number)) if done else None


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _arm_section(a: ArmTuning) -> str:
    keys = list(a.space)
    space = "\n".join(f"| `{k}` | {describe(k, d)} |" for k, d in a.space.items())
    head = "| trial | state | steps | val accuracy | " + " | ".join(f"`{k}`" for k in keys) + " |"
    rule = "|---" * (4 + len(keys)) + "|"
    rows = [
        f"| {t.number} | {t.state} | {t.steps} | {'' if t.value is None else f'{t.value:.3f}'} | "
        + " | ".join(_value(t.settings.get(k, "")) for k in keys)
        + " |"
        for t in a.trials
    ]
    best = a.best
    verdict = (
        f"Best: trial {best.number}, val accuracy {best.value:.3f}; written to `{a.overlay}`."
        if best and a.overlay
        else "No trial completed: no overlay written."
    )
    states = {s: sum(t.state == s for t in a.trials) for s in ("complete", "pruned", "failed")}
    return (
        f"## {a.arm} ({a.algorithm}; Optuna study `{a.study}`)\n\n"
        f"Budget: {a.budget.trials} trials x {a.budget.steps} steps = {a.budget.total} training steps; "
        f"spent {a.spent} in {len(a.trials)} trials ({states['complete']} complete, {states['pruned']} pruned, "
        f"{states['failed']} failed); val accuracy every {a.eval_every} steps; "
        f"{a.seconds:.0f} s of wall time in this call.\n\n"
        f"| setting | searched |\n|---|---|\n{space}\n\n{head}\n{rule}\n" + "\n".join(rows) + f"\n\n{verdict}\n"
    )


def markdown(arms: list[ArmTuning], params_file: str, train_seed: int, sampler: str) -> str:
    """The whole report: how the search ran, then a section per arm."""
    intro = (
        f"# Tuning of `{params_file}`\n\n"
        f"Each arm searched its own settings with {sampler} on the validation split (greedy val accuracy at "
        f"the trial's last step; the test split is not read), every trial from the same SFT reference at "
        f"training seed {train_seed}, on an equal budget of training steps per arm: a pruned trial spends "
        "only the steps it trained, and the rest goes to further trials. `make ablation` applies the "
        "overlays.\n"
    )
    return intro + "\n" + "\n".join(_arm_section(a) for a in arms)
