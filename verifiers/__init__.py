"""Reward functions, registered by name: each a class with its own typed options and a batch call
``score(completions, rows) -> scores in [0, 1]`` that never raises on anything a model can write.
They depend on nothing above them (no grpoflow, Prefect, MLflow or DVC).

Importing this package imports no verifier implementation (nor the sandbox): the registry imports
a built-in verifier's module (:mod:`verifiers.catalog`) when it is first asked for, so a module
that needs only ``verifiers.extract`` or the sandbox's :class:`~verifiers.limits.Limits` does not
depend on every verifier."""

from verifiers.registry import Verifier, create, names, options_model, register, tasks_of

__all__ = ["Verifier", "create", "names", "options_model", "register", "tasks_of"]
