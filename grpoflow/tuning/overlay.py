"""The tuned overlay of an arm, ``params/tuned/<set>-<arm>.yaml``: the best trial's settings as a
partial params file (only the tuned keys, nested as in a set), with a header saying where they
come from. The seeded comparison (flows/ablation.py) applies it as the arm's overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpoflow.config import ConfigError, Params, set_dotted

TUNED_DIR = Path("params/tuned")


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


def overlay_text(settings: dict[str, Any], header: list[str]) -> str:
    """The overlay file: ``header`` as comment lines, then ``settings`` nested."""
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.safe_dump(nested(settings), sort_keys=True)


def read_overlay(path: str | Path) -> dict[str, Any]:
    """An overlay's settings as dotted keys; :class:`ConfigError` naming the file when it is no mapping."""
    try:
        tree = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(tree, dict) or not tree:
        raise ConfigError(f"{path}: a tuned overlay is a mapping of params sections (e.g. rl: {{engine: {{lr: ...}}}})")
    return dotted(tree)


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
