"""Reward functions, registered by name: each a class with its own typed options and a batch call
``score(completions, rows) -> scores in [0, 1]`` that never raises on anything a model can write.
They depend on nothing above them (no grpoflow, Prefect, MLflow or DVC)."""

# Importing the modules registers their verifiers.
from verifiers import code as _code  # noqa: E402,F401
from verifiers import format as _format  # noqa: E402,F401
from verifiers import math as _math  # noqa: E402,F401
from verifiers.registry import Verifier, create, names, options_model, register, tasks_of

__all__ = ["Verifier", "create", "names", "options_model", "register", "tasks_of"]
