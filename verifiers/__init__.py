"""Reward functions: pure functions from (completion, reference) to a float, registered by name.

Every verifier returns a float in [0, 1] and never raises on any string a model can produce.
They depend on nothing above them (no grpoflow, Prefect, MLflow or DVC).
"""

from verifiers.registry import Verifier, get, names, register

# Importing the modules registers their verifiers.
from verifiers import code as _code  # noqa: E402,F401
from verifiers import format as _format  # noqa: E402,F401
from verifiers import math as _math  # noqa: E402,F401

__all__ = ["Verifier", "get", "names", "register"]
