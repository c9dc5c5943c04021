"""Verifiers by name. A verifier is a class: its own typed options, the row tasks it judges
(``tasks``), a batch call ``score(completions, rows) -> scores in [0, 1]`` where each row is the task row
the completion answers (``reference_answer``, and ``tests`` for code), and the rule saying which scores
mean "right" (``accepts``). Training, evaluation and the verifier gate reach verifiers only through
:func:`create`, so a new verifier is one class in one module, named in :mod:`verifiers.catalog`.
A built-in verifier's module is imported when the verifier is first asked for: importing this
module imports no verifier implementation."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from verifiers.catalog import BUILTIN, BUILTIN_TASKS
from verifiers.limits import Limits

if TYPE_CHECKING:
    from verifiers.check import Case

Row = Mapping[str, Any]
ACCEPT_AT = 0.5  # the default score from which a completion counts as right


def default_accepts(score: float) -> bool:
    """The default :meth:`Verifier.accepts`: a score of at least :data:`ACCEPT_AT`."""
    return score >= ACCEPT_AT


class NoOptions(BaseModel):
    """A verifier without options."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Verifier(ABC):
    """A reward function over a batch. ``score`` never raises on anything a model can write; a row
    the verifier cannot use is found before training by :meth:`check_rows`.

    ``tasks`` names the row tasks (a row's ``task`` field, "math" when absent) the verifier judges:
    callers score only those rows with it, so a math verifier never sees a code row, nor the reverse.
    Every registered verifier declares it."""

    name: ClassVar[str]
    tasks: ClassVar[frozenset[str]]
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init__(
        self, options: Mapping[str, Any] | BaseModel | None = None, *, sandbox: Limits | None = None, workers: int = 1
    ):
        """``options``: this verifier's own settings (``rewards[].options``); ``sandbox``: the limits
        for executing code; ``workers``: processes a batch may use for CPU-heavy checks."""
        self.options = (
            options if isinstance(options, self.Options) else self.Options.model_validate(dict(options or {}))
        )
        self.sandbox = sandbox or Limits()
        self.workers = workers

    @abstractmethod
    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """One score in [0, 1] per completion, against the row it answers."""

    def accepts(self, score: float) -> bool:
        """Whether ``score`` means the completion is right (the gate's and evaluation's verdict);
        by default a score of at least 0.5."""
        return default_accepts(score)

    def check_rows(self, rows: Sequence[Row]) -> list[tuple[int, str]]:
        """``(index, why)`` for every row whose reference this verifier cannot use (a free or a
        lost reward otherwise)."""
        return []

    @abstractmethod
    def gate_cases(self, rows: Sequence[Row]) -> list[Case]:
        """Completions built from ``rows`` that must pass and must fail: the verifier gate's self-test."""


_REGISTRY: dict[str, type[Verifier]] = {}


def register(cls: type[Verifier]) -> type[Verifier]:
    """Class decorator: make ``cls`` available as ``rewards: [{name: <cls.name>}]``; it must say which
    row tasks it judges (a non-empty ``tasks``)."""
    tasks = getattr(cls, "tasks", None)
    if not isinstance(tasks, frozenset) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise TypeError(f"verifier {cls.name!r} must set tasks to a non-empty frozenset of task names")
    if cls.name in BUILTIN_TASKS and BUILTIN_TASKS[cls.name] != tasks:
        said = sorted(BUILTIN_TASKS[cls.name])
        raise TypeError(f"verifier {cls.name!r} judges {sorted(tasks)}, but verifiers/catalog.py says {said}")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"verifier {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def _class(name: str) -> type[Verifier]:
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(BUILTIN[name])  # its @register runs on import
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown verifier {name!r}; registered: {names()}") from None


def create(name: str, options: Mapping[str, Any] | None = None, **resources: Any) -> Verifier:
    """The verifier ``name`` with its ``options`` (validated) and resources (``sandbox``, ``workers``)."""
    return _class(name)(options, **resources)


def options_model(name: str) -> type[BaseModel]:
    """The typed options of verifier ``name``."""
    return _class(name).Options


def tasks_of(name: str) -> frozenset[str]:
    """The row tasks verifier ``name`` judges (its class's ``tasks``), without building it; a built-in one's
    from the catalog, without importing it."""
    if name not in _REGISTRY and name in BUILTIN_TASKS:
        return BUILTIN_TASKS[name]
    return _class(name).tasks


def names() -> list[str]:
    """Every verifier's name: the built-in ones (:mod:`verifiers.catalog`, loaded or not) and any
    registered beside them."""
    return sorted({*BUILTIN, *_REGISTRY})
