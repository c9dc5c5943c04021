"""An algorithm as the pipeline sees it before any torch is imported (:class:`Entry`): each folder of
:mod:`grpoflow.algorithms` states one as its ``ENTRY``. Plain data, importing nothing of the project,
so that the catalog can read every folder's while the params schema is still being built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One algorithm's spec: what the catalog, the schema and the stages read of it."""

    name: str  # its stage, its models/<name> folder, its params section and its arm's default name
    title: str  # how reports and MLflow run names write it
    module: str  # the module that defines ALGORITHM (imports torch)
    config: str | None = None  # a torch-free module with SECTION, SPACE and RULES (None: no settings of its own)
    kl_key: str | None = None  # its own params key of the KL coefficient (a reference loads when > 0)
    curves: tuple[str, ...] = ("reward_mean", "kl", "val_accuracy")  # history columns its stage plots
    critic: bool = False  # trains a value model beside the policy (compare's memory breakdown)
    stage_module: str | None = None  # a CLI of its own for its stage; None: the generic one (tasks/train.py)
    smoke: Mapping[str, Any] = field(default_factory=dict)  # dotted overrides that make it smoke-sized (--smoke)
    gpu_limited: bool = True  # its stage holds a slot of the GPU concurrency limit (orchestration.gpu_stages)
    opt_in: bool = False  # a default run (dvc.yaml, compare, default arms) leaves it out; it trains as a named arm

    @property
    def sections(self) -> tuple[str, ...]:
        """Its own params sections, besides the shared ``rl``: the one named after it, where it has settings."""
        return (self.name,) if self.config else ()
