"""One way to plug a piece in: a :class:`Registry` of one kind (advantage estimators, KL estimators,
loss aggregations, algorithms), read like a dict by name.

Every kind has a torch-free name table that the params schema validates a set against (so loading
a file imports no maths); a piece registers under a name of that table, once, with
``@REGISTRY.register("name")`` beside its code. A name the table lists but nothing registered yet
is imported from the module the table names for it (an algorithm's), so asking for a piece is
enough to load it. ``verifiers/registry.py`` follows the same contract for verifiers, in code of its
own: ``verifiers/`` imports nothing of ``grpoflow/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """The pieces of one ``kind`` by name, each name one of ``table``'s (named ``where`` in errors);
    ``module_of(name)``, where given, is the module whose import registers ``name``."""

    def __init__(
        self, kind: str, table: Mapping[str, Any], where: str, module_of: Callable[[str], str] | None = None
    ) -> None:
        self.kind, self.table, self.where, self._module_of = kind, table, where, module_of
        self._pieces: dict[str, T] = {}

    def register(self, name: str, adapt: Callable[[T], T] | None = None) -> Callable[[T], T]:
        """A decorator that registers its function (or object) under ``name``, through ``adapt`` where
        the registry keeps an adapted form; it returns the piece as given."""

        def add(piece: T) -> T:
            if name not in self.table:  # the schema would refuse the name at load
                raise ValueError(f"{self.kind} {name!r}: add it to {self.where}")
            if name in self._pieces:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._pieces[name] = adapt(piece) if adapt else piece
            return piece

        return add

    def __getitem__(self, name: str) -> T:
        if name not in self._pieces and name in self.table and self._module_of is not None:
            importlib.import_module(self._module_of(name))  # its registration runs on import
        if name not in self._pieces:
            known = ", ".join(sorted(self.table))
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}")
        return self._pieces[name]

    def __contains__(self, name: object) -> bool:
        return name in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def registered(self) -> list[str]:
        """The names of the table registered so far (a lazily loaded piece counts once it was asked
        for; one registered under a table that has since dropped it, a test's, does not)."""
        return [name for name in self._pieces if name in self.table]
