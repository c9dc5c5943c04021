"""The tuned overlay of an arm, ``params/tuned/<set>-<arm>.yaml``: the best trial's settings as a
partial params file (only the tuned keys, nested as in a set), with a header saying where they
come from and a ``tuned_with`` record of the tuning that found them (its budget, trials and best
score). The seeded comparison (flows/ablation.py) applies the settings as the arm's overrides; a
later tune replaces them only on a budget at least as large (flows/tune.py)."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from grpoflow.config import ConfigError, Params, set_dotted

TUNED_DIR = Path("params/tuned")
PROVENANCE_KEY = "tuned_with"  # the overlay's record of the tuning that wrote it; not a params section
_HEADER_BUDGET = re.compile(r"budget (\d+) x (\d+) = (\d+) training steps")  # overlays written before the record


def overlay_path(params_file: str | Path, arm: str) -> Path:
    """Where arm ``arm``'s tuned settings for the set in ``params_file`` live."""
    return TUNED_DIR / f"{Path(params_file).stem}-{arm}.yaml"


def nested(settings: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> value as the sections of a params file."""
    tree: dict[str, Any] = {}
    for key in sorted(settings):
        set_dotted(tree, key, settings[key])
    return tree


def dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A params file's sections as dotted keys -> value (the inverse of :func:`nested`)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def overlay_text(settings: dict[str, Any], header: list[str], provenance: dict[str, Any] | None = None) -> str:
    """The overlay file: ``header`` as comment lines, then ``settings`` nested, then the ``provenance``
    record (budget_steps, trials, ...) under :data:`PROVENANCE_KEY`."""
    comments = "".join(f"# {line}\n" for line in header)
    record = yaml.safe_dump({PROVENANCE_KEY: provenance}, sort_keys=False) if provenance else ""
    return comments + yaml.safe_dump(nested(settings), sort_keys=True) + record


def _tree(path: str | Path) -> dict[str, Any]:
    try:
        tree = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(tree, dict) or not {k: v for k, v in tree.items() if k != PROVENANCE_KEY}:
        raise ConfigError(f"{path}: a tuned overlay is a mapping of params sections (e.g. rl: {{engine: {{lr: ...}}}})")
    return tree


def read_overlay(path: str | Path) -> dict[str, Any]:
    """An overlay's settings as dotted keys; :class:`ConfigError` naming the file when it is no mapping."""
    return dotted({k: v for k, v in _tree(path).items() if k != PROVENANCE_KEY})


def without(path: str | Path, keys: Collection[str]) -> str | None:
    """The overlay's text without the settings ``keys`` (dotted), its header and ``tuned_with`` record kept;
    None when no setting is left."""
    text = Path(path).read_text()
    tree = _tree(path)
    settings = {
        k: v for k, v in dotted({k: v for k, v in tree.items() if k != PROVENANCE_KEY}).items() if k not in keys
    }
    header = [line.removeprefix("#").strip() for line in text.splitlines() if line.startswith("#")]
    return overlay_text(settings, header, tree.get(PROVENANCE_KEY)) if settings else None


def overlay_budget(path: str | Path) -> int | None:
    """The training steps per arm of the tuning that wrote the overlay: its ``tuned_with`` record, else
    its header's "budget T x S = N training steps"; None where neither says (a hand-written file)."""
    record = _tree(path).get(PROVENANCE_KEY)
    if isinstance(record, dict) and isinstance(record.get("budget_steps"), int):
        return record["budget_steps"]
    found = _HEADER_BUDGET.search(Path(path).read_text())
    return int(found.group(3)) if found else None


def beside_path(params_file: str | Path, arm: str, budget_steps: int) -> Path:
    """Where a tune on a smaller budget than the overlay's writes its best settings instead: beside the
    overlay, under a name the ablation never reads."""
    return TUNED_DIR / f"{Path(params_file).stem}-{arm}.budget-{budget_steps}.yaml"


def tuned_arm_overrides(params: Params, tuned: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Overrides that make each arm of ``tuned`` (arm -> its overlay's settings) one of the set's own
    arms: its algorithm, and its overrides with the overlay's settings after them. The arm's
    stages then depend on that definition (tasks/stages.py), so a new overlay trains them again."""
    out: dict[str, Any] = {}
    for arm, settings in tuned.items():
        base = params.ablation.arm(arm)
        out[f"ablation.custom_arms.{arm}"] = {"algorithm": base.algorithm, "overrides": {**base.overrides, **settings}}
    return out


def shown(settings: dict[str, Any]) -> str:
    """Settings on one line: ``rl.engine.lr=0.00031, grpo.beta=0.012``."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items())
