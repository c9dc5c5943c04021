"""The ``tune`` section: how ``make tune`` searches each arm's own settings with Optuna, on the
validation split, on an equal budget of training steps per arm (flows/tune.py runs it).

Each algorithm has its space: a field per setting, named for what it tunes, holding the range to
search (``null``: not searched, the set's value stays). Each space's ``KEYS`` names the params key each
field sets, so that a space is typed and documented here while a trial is an ordinary set. A space is
the field of ``tune`` named after its algorithm: each algorithm declares its space in its folder
(:mod:`grpoflow.algorithms`), and :mod:`grpoflow.config.params` adds it here."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from grpoflow.config.base import _Section


class Dim(_Section):
    """One setting's range: numbers from ``low`` to ``high`` (log-uniform where ``log``; whole
    numbers for an integer setting), or one of ``choices``."""

    low: float | None = Field(None, description="Lowest value searched (with high).")
    high: float | None = Field(None, description="Highest value searched (with low).")
    log: bool = Field(False, description="Sample on a log scale (learning rates, KL weights); low must be > 0.")
    choices: list[int | float] | None = Field(
        None, min_length=1, description="The values searched, instead of a range."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Dim:
        if self.choices is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("give either choices or low and high, not both")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give low and high (or choices)")
        if self.low > self.high:
            raise ValueError(f"low={self.low} is above high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0 (got {self.low})")
        return self


def dim(low: float, high: float, log: bool = False) -> Dim:
    """A range from ``low`` to ``high`` (log-uniform where ``log``): a space field's default."""
    return Dim(low=low, high=high, log=log)


class Space(_Section):
    """A space whose ranges may be given in part (``tune.ppo.critic_warmup_steps.high: 5``): the rest
    comes from the field's default range (its choices dropped for a range given, its ends for choices),
    through the completion every section has (:meth:`_Section._complete`). ``KEYS`` names the params
    key each of its fields sets."""

    KEYS: ClassVar[dict[str, str]] = {}

    @classmethod
    def _kept_of_default(cls, default: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        drop = ("low", "high") if "choices" in given else ("choices",) if {"low", "high"} & given.keys() else ()
        return {k: v for k, v in default.items() if k not in drop}


class PrunerConfig(_Section):
    """Optuna's median pruner: a trial whose val accuracy trails the median of earlier trials at the
    same step stops there, and the steps it did not take go to further trials."""

    enabled: bool = Field(True, description="Stop trailing trials early (false: every trial runs its steps).")
    startup_trials: int = Field(2, ge=0, description="Finished trials before any is pruned.")
    warmup_steps: int = Field(0, ge=0, description="Steps of a trial before it may be pruned.")


class SharedTuneConfig(_Section):
    """``make tune``: Optuna's TPE search of each arm's space (its algorithm's: ``grpo`` or ``ppo``) on
    val accuracy, never test; every arm gets ``trials`` x ``steps`` training steps."""

    trials: int = Field(8, ge=1, description="Trials per arm; the budget is trials x steps training steps.")
    steps: int | None = Field(None, ge=1, description="Training steps per trial (null: rl.steps, as the runs).")
    eval_every: int | None = Field(
        None, ge=1, description="Val accuracy (for the pruner) every N steps of a trial; null: a fifth of its steps."
    )
    train_seed: int = Field(
        1000,
        ge=0,
        description="Every trial's training seed, apart from the comparison's seeds: the settings are not "
        "fitted to one of their sampling noises.",
    )
    sampler_seed: int = Field(0, ge=0, description="Seed of the TPE sampler: the same trials are proposed again.")
    startup_trials: int = Field(3, ge=0, description="Random trials before TPE models the space.")
    pruner: PrunerConfig = Field(default_factory=PrunerConfig, description="Stopping trailing trials early.")

    def trial_steps(self, rl_steps: int) -> int:
        """Training steps of one trial: ``steps``, else the set's ``rl.steps``."""
        return self.steps or rl_steps

    def trial_eval_every(self, rl_steps: int) -> int:
        """Steps between a trial's val evaluations: ``eval_every``, else a fifth of its steps (at least 1)."""
        return self.eval_every or max(1, self.trial_steps(rl_steps) // 5)

    def space(self, algorithm: str) -> dict[str, Dim]:
        """Algorithm ``algorithm``'s space (the field of its name) as params key -> range, the settings
        left out (null) dropped; empty for an algorithm without a space of its own."""
        section = getattr(self, algorithm, None)
        if not isinstance(section, Space):
            return {}
        return {key: dim for name, key in section.KEYS.items() if (dim := getattr(section, name)) is not None}
