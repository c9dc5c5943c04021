"""A search space as trials sample it, and the set a trial trains: the arm's set with the trial's
settings, its step budget and its val evaluations."""

from __future__ import annotations

import math
import types
from typing import Any, Protocol, Union, get_args, get_origin

from pydantic import BaseModel

from grpoflow.config import ConfigError, Dim, Params, set_dotted, validate_params


class Suggests(Protocol):
    """What a trial offers to sample a setting (an ``optuna.Trial``)."""

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float:
        """A number from ``low`` to ``high``."""
        ...

    def suggest_int(self, name: str, low: int, high: int, *, log: bool = False) -> int:
        """A whole number from ``low`` to ``high``."""
        ...

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        """One of ``choices``."""
        ...


def is_integer(key: str, model: type[BaseModel] = Params) -> bool:
    """Whether the params field at dotted ``key`` (``ppo.critic_warmup_steps``) holds whole numbers."""
    *parents, leaf = key.split(".")
    for part in parents:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    ann = model.model_fields[leaf].annotation
    if get_origin(ann) in (Union, types.UnionType):
        return int in get_args(ann)
    return ann is int


def int_bounds(dim: Dim) -> tuple[int, int]:
    """The whole numbers inside a range."""
    assert dim.low is not None and dim.high is not None
    return math.ceil(dim.low), math.floor(dim.high)


def suggest(trial: Suggests, space: dict[str, Dim]) -> dict[str, Any]:
    """One value per setting of ``space`` (params key -> range), sampled by ``trial`` under the key's name."""
    values: dict[str, Any] = {}
    for key, dim in space.items():
        if dim.choices is not None:
            values[key] = trial.suggest_categorical(key, list(dim.choices))
        elif is_integer(key):
            values[key] = trial.suggest_int(key, *int_bounds(dim), log=dim.log)
        else:
            assert dim.low is not None and dim.high is not None
            values[key] = trial.suggest_float(key, dim.low, dim.high, log=dim.log)
    return values


def trial_overrides(steps: int, eval_every: int) -> dict[str, Any]:
    """What every trial sets besides its settings: its steps, val evaluations at the pruner's pace,
    one checkpoint (at the end: a trial is redone whole, never resumed), and no preflight (the
    starting policy is every trial's, and the runs check it)."""
    return {"rl.steps": steps, "rl.eval_every": eval_every, "rl.checkpoint_every": steps, "rl.preflight.prompts": 0}


def trial_set(arm_set: Params, algorithm: str, settings: dict[str, Any], steps: int, eval_every: int) -> Params:
    """The set a trial trains: arm ``arm_set`` with ``settings`` (params key -> value), validated
    as a set that trains ``algorithm`` alone: its rules apply, the other algorithm's do not (a GRPO
    trial of a few steps is not refused for the set's PPO warm-up, and a PPO trial is checked for it)."""
    raw = arm_set.model_dump(mode="json")
    for key, value in {**settings, **trial_overrides(steps, eval_every), "experiment.stages": [algorithm]}.items():
        set_dotted(raw, key, value)
    return validate_params(raw, source="the trial's settings")


def candidates(key: str, dim: Dim) -> list[Any]:
    """The values of a range that bound what trials may sample: its ends, or each choice."""
    if dim.choices is not None:
        return list(dim.choices)
    return list(int_bounds(dim)) if is_integer(key) else [dim.low, dim.high]


def space_problems(arm_set: Params, algorithm: str, space: dict[str, Dim], steps: int, eval_every: int) -> list[str]:
    """Each end or choice of ``space`` that gives a set the schema or its rules refuse (found before
    any trial trains), one line each; empty when every one gives a valid set."""
    problems = []
    for key, dim in space.items():
        if is_integer(key) and dim.choices is None and int_bounds(dim)[0] > int_bounds(dim)[1]:
            problems.append(f"{key}: the range {dim.low}..{dim.high} holds no whole number")
            continue
        for value in candidates(key, dim):
            try:
                trial_set(arm_set, algorithm, {key: value}, steps, eval_every)
            except ConfigError as exc:
                reason = str(exc).splitlines()[-1].strip(" -")
                problems.append(f"{key}={value}: {reason}")
    return problems


def describe(key: str, dim: Dim) -> str:
    """A range as the report states it: ``5e-05 .. 0.001 (log)``, ``0 .. 30 (integers)``, ``one of 4, 8, 16``."""
    if dim.choices is not None:
        return "one of " + ", ".join(f"{c:g}" for c in dim.choices)
    if is_integer(key):
        low, high = int_bounds(dim)
        return f"{low} .. {high} (integers{', log' if dim.log else ''})"
    return f"{dim.low:g} .. {dim.high:g}{' (log)' if dim.log else ''}"
