"""Verifiers by name, so that params can choose them."""

from __future__ import annotations

from typing import Any, Callable

Verifier = Callable[[str, Any], float]
_REGISTRY: dict[str, Verifier] = {}


def register(name: str) -> Callable[[Verifier], Verifier]:
    def add(fn: Verifier) -> Verifier:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"verifier {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return add


def get(name: str) -> Verifier:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown verifier {name!r}; registered: {sorted(_REGISTRY)}") from None


def names() -> list[str]:
    return sorted(_REGISTRY)
