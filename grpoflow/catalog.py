"""The RL algorithms by name: the only list of them. A table of names and declarations, importing no
maths library, so that the params schema, the cross-field rules, the stage declarations (dvc.yaml),
the ablation's arms, tuning and the comparison all read the same list without loading torch.

An algorithm is one folder of :mod:`grpoflow.algorithms`, found there: its spec (``ENTRY``, an
:class:`~grpoflow.algorithms.entry.Entry`), its settings (section, tune space, rules) and its update;
its params section, its stage, its arm, its place in tune, smoke runs, evaluate and compare follow
from the spec. An algorithm kept outside this repository, a folder of the same shape on the Python
path, joins through ``GRPOFLOW_ALGORITHMS``: its package (its ``ENTRY``) or ``module:attribute`` of
an :class:`Entry` or a list of them, comma-separated, read when this module is first imported (the
params schema is built from it then). A spec's module imports ``grpoflow.algorithms.entry`` alone:
its own settings would import the schema that is waiting for the catalog. Every process of a run
must see the same value: dvc.yaml is rendered from it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from grpoflow import algorithms
from grpoflow.algorithms.entry import Entry

PLUGINS_ENV = "GRPOFLOW_ALGORITHMS"


# The default algorithm: an arm's algorithm unless it names one, the baseline of compare's verdict.
DEFAULT = "grpo"


def _folders() -> dict[str, Entry]:
    """The ``ENTRY`` of every folder of :mod:`grpoflow.algorithms`, the default first."""
    found: list[Entry] = []
    for info in pkgutil.iter_modules(algorithms.__path__, algorithms.__name__ + "."):
        entry = getattr(importlib.import_module(info.name), "ENTRY", None) if info.ispkg else None
        if entry is not None:
            found.append(entry)
    found.sort(key=lambda e: (e.name != DEFAULT, e.name))
    return {e.name: e for e in found}


BUILTIN: dict[str, Entry] = _folders()


def _plugins(value: str) -> list[Entry]:
    """The entries ``GRPOFLOW_ALGORITHMS`` names (``package`` or ``module:attribute``, comma-separated)."""
    entries: list[Entry] = []
    for spec in filter(None, (s.strip() for s in value.split(","))):
        module, _, attribute = spec.partition(":")
        loaded = importlib.import_module(module)
        names = (attribute,) if attribute else ("ENTRIES", "ENTRY")
        found = next((getattr(loaded, n) for n in names if hasattr(loaded, n)), None)
        found = [found] if isinstance(found, Entry) else list(found or [])
        if not found or not all(isinstance(e, Entry) for e in found):
            raise ValueError(f"{PLUGINS_ENV}: {spec} is not a grpoflow.catalog.Entry or a list of them")
        entries += found
    return entries


ALGORITHMS: dict[str, Entry] = {**BUILTIN, **{e.name: e for e in _plugins(os.environ.get(PLUGINS_ENV, ""))}}


def names() -> list[str]:
    """Every algorithm's name, the default first."""
    return list(ALGORITHMS)


def default_run() -> list[str]:
    """The algorithms a default run trains (dvc.yaml's stages, compare): all but the opt-in ones."""
    return [name for name, e in ALGORITHMS.items() if not e.opt_in]


def default() -> str:
    """The algorithm an arm trains unless it names one."""
    return DEFAULT


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


def settings(name: str) -> Any:
    """Algorithm ``name``'s settings module (``SECTION``, ``SPACE``, ``RULES``), or None where it has none."""
    module = entry(name).config
    if module is None:
        return None
    settings = importlib.import_module(module)
    if not hasattr(settings, "SECTION"):  # a module still loading (an import circle) or one without it
        raise ImportError(f"{module} defines no SECTION: algorithm {name!r} has no params section to add")
    return settings


def smoke_overrides() -> dict[str, Any]:
    """Every algorithm's smoke-sized settings, as dotted overrides (``--smoke``)."""
    return {key: value for e in ALGORITHMS.values() for key, value in e.smoke.items()}


def gpu_limited() -> list[str]:
    """The algorithms whose stage needs the accelerator."""
    return [name for name, e in ALGORITHMS.items() if e.gpu_limited]


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
