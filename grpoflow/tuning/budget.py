"""The equal budget of tuning: every arm gets ``trials`` x ``steps`` training steps, counted in
steps, not trials. A pruned trial spends only the steps it trained, and what it left goes to
further trials; a trial starts only while a whole one fits, so no trial is cut short by the budget
(the arms' spending differs by less than one trial's steps)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """``trials`` trials of ``steps`` training steps: ``total`` steps per arm."""

    trials: int
    steps: int

    @property
    def total(self) -> int:
        """Training steps per arm."""
        return self.trials * self.steps

    def fits(self, spent: int) -> bool:
        """Whether one more whole trial fits after ``spent`` steps."""
        return spent + self.steps <= self.total

    def left(self, spent: int) -> int:
        """Steps not yet spent."""
        return max(0, self.total - spent)
