"""The RL algorithms by name: the only list of them. A table of names and declarations, importing no
maths library, so that the params schema, the cross-field rules, the stage declarations (dvc.yaml),
the ablation's arms, tuning and the comparison all read the same list without loading torch.

An algorithm is its module (an update, ``update(batch, learner) -> metrics``, and an
``ALGORITHM``, :class:`grpoflow.rl.algorithm.Algorithm`) and one :class:`Entry` in :data:`BUILTIN`;
its stage, its arm, its place in evaluate and compare follow from the entry. An algorithm kept
outside this repository joins through ``GRPOFLOW_ALGORITHMS``: ``module:attribute`` of an
:class:`Entry` or a list of them (comma-separated; the attribute defaults to ``ENTRIES``), in a
module as light as this one, read when this module is first imported. Every process of a run must
see the same value: dvc.yaml is rendered from it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

PLUGINS_ENV = "GRPOFLOW_ALGORITHMS"


@dataclass(frozen=True)
class Entry:
    """One algorithm as the pipeline sees it, before any torch is imported."""

    name: str  # its stage, its models/<name> folder and its arm's default name
    title: str  # how reports and MLflow run names write it
    module: str  # the module that defines ALGORITHM (imports torch)
    kl_key: str | None = None  # its own params key of the KL coefficient (a reference loads when > 0)
    sections: tuple[str, ...] = ()  # its own params sections, besides the shared ``rl``
    curves: tuple[str, ...] = ("reward_mean", "kl", "val_accuracy")  # history columns its stage plots
    critic: bool = False  # trains a value model beside the policy (compare's memory breakdown)
    rules: str | None = None  # a torch-free module with RULES: its own cross-field rules, (params) -> [messages]
    stage_module: str | None = None  # a CLI of its own for its stage; None: the generic one (tasks/stages.py)


# The first is the default: an arm's algorithm unless it names one, the baseline of compare's verdict.
BUILTIN: dict[str, Entry] = {
    "grpo": Entry(
        name="grpo",
        title="GRPO",
        module="grpoflow.rl.grpo",
        kl_key="grpo.beta",
        sections=("grpo",),
        curves=("reward_mean", "kl", "entropy", "val_accuracy"),
        rules="grpoflow.config.grpo",
        stage_module="tasks.grpo",
    ),
    "ppo": Entry(
        name="ppo",
        title="PPO",
        module="grpoflow.rl.ppo",
        kl_key="ppo.kl_coef",
        sections=("ppo",),
        curves=("reward_mean", "kl", "value_loss", "explained_variance", "val_accuracy"),
        critic=True,
        rules="grpoflow.config.ppo",
        stage_module="tasks.ppo",
    ),
}


def _plugins(value: str) -> list[Entry]:
    """The entries ``GRPOFLOW_ALGORITHMS`` names (``module:attribute``, comma-separated)."""
    entries: list[Entry] = []
    for spec in filter(None, (s.strip() for s in value.split(","))):
        module, _, attribute = spec.partition(":")
        found = getattr(importlib.import_module(module), attribute or "ENTRIES", None)
        found = [found] if isinstance(found, Entry) else list(found or [])
        if not found or not all(isinstance(e, Entry) for e in found):
            raise ValueError(f"{PLUGINS_ENV}: {spec} is not a grpoflow.catalog.Entry or a list of them")
        entries += found
    return entries


ALGORITHMS: dict[str, Entry] = {**BUILTIN, **{e.name: e for e in _plugins(os.environ.get(PLUGINS_ENV, ""))}}


def names() -> list[str]:
    """Every algorithm's name, the default first."""
    return list(ALGORITHMS)


def default() -> str:
    """The algorithm an arm trains unless it names one."""
    return next(iter(ALGORITHMS))


def entry(name: str) -> Entry:
    """Algorithm ``name``'s entry; a ValueError listing the known ones otherwise."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def title(name: str) -> str:
    """How reports write a model trained by ``name`` (any other name as it is)."""
    return ALGORITHMS[name].title if name in ALGORITHMS else name


def sections() -> list[str]:
    """Every algorithm's own params sections, in catalog order."""
    return [s for e in ALGORITHMS.values() for s in e.sections]


def kl_coef(params: Any, name: str) -> float:
    """The KL coefficient algorithm ``name`` starts from: its own key (none: 0, no reference)."""
    key = entry(name).kl_key
    if key is None:
        return 0.0
    section, field = key.split(".")
    return float(getattr(getattr(params, section), field))


@contextmanager
def extended(*entries: Entry) -> Iterator[None]:
    """The catalog with ``entries`` added for the block (a test's third algorithm); restored after."""
    saved = dict(ALGORITHMS)
    ALGORITHMS.update({e.name: e for e in entries})
    try:
        yield
    finally:
        ALGORITHMS.clear()
        ALGORITHMS.update(saved)
