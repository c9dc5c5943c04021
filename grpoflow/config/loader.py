"""Reading, merging and validating params files, with errors that name the file and every bad key."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from grpoflow.config.base import ConfigError, set_dotted
from grpoflow.config.params import Params, describe_schema
from grpoflow.config.rl import PRESETS, preset_values


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``Model``, ``list[Model]`` or ``Model | None``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _submodel(arg)
        if found:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid at ``loc`` (the parent of a rejected key), for a did-you-mean hint."""
    for part in loc:
        if isinstance(part, int):  # an index into a list of sections
            continue
        field = model.model_fields.get(str(part))
        sub = _submodel(field.annotation) if field else None
        if sub is None:
            return []
        model = sub
    return list(model.model_fields)


def _describe(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "<top level>"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _allowed_keys(Params, loc[:-1]), n=1)
        # Not in its section: maybe it lives (or a near spelling of it) in another one, e.g. grpo.steps -> rl.steps.
        every = {".".join(k.split(".")[:i]) for k, _, _ in describe_schema() for i in range(1, k.count(".") + 2)}
        same_depth = {k.rsplit(".", 1)[-1]: k for k in sorted(every, reverse=True) if k.count(".") == len(loc) - 1}
        elsewhere = difflib.get_close_matches(str(loc[-1]), list(same_depth), n=1)
        hint = (
            f" (did you mean '{close[0]}'?)"
            if close
            else f" (did you mean '{same_depth[elsewhere[0]]}'?)"
            if elsewhere
            else ""
        )
        return f"{key}: unknown key{hint}"
    from grpoflow.guard import clip, short_repr

    got = err.get("input")
    # Shortened: the value may be huge (a list of a million items), and the message goes to logs and the UI.
    got_text = "" if isinstance(got, dict) else f" (got {short_repr(got)})"
    if not loc:  # a cross-field rule's message names its own keys first
        return f"{clip(str(err['msg']))}{got_text}"
    return f"{key}: {clip(str(err['msg']))}{got_text}"


def validate_params(raw: dict[str, Any], source: str = "<params>") -> Params:
    """Validate a params mapping, raising :class:`ConfigError` that names every bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        lines = "\n".join(f"  - {_describe(dict(e))}" for e in exc.errors())
        raise ConfigError(f"{source}: invalid parameters\n{lines}") from None


def load_params(path: str | Path, overrides: dict[str, Any] | None = None) -> Params:
    """Read, merge dotted-key ``overrides`` into, and validate a params YAML file (its name only of
    ``[A-Za-z0-9._/-]``, its YAML without anchors or aliases)."""
    from grpoflow.guard import InputError, load_yaml, params_name_problem

    path = Path(path)
    # The name as dvc.yaml would hold it: relative to the checkout where it lies inside (whatever the
    # checkout's own path), else as given.
    inside = path.absolute().is_relative_to(Path.cwd())
    if problem := params_name_problem(str(path.absolute().relative_to(Path.cwd()) if inside else path)):
        raise ConfigError(problem)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise ConfigError(f"{path}: not a text params file (byte {exc.start} is not UTF-8: {bad!r})") from None
    try:
        raw = load_yaml(text)  # no anchors or aliases: nested ones expand to gigabytes
    except InputError as exc:
        raise ConfigError(f"{path}, {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    # An empty set would validate as all defaults, yet DVC reads each stage's keys from the file itself.
    if raw is None:
        raise ConfigError(f"{path}: the params file is empty (copy params/default.yaml to start one)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        set_dotted(raw, dotted, value)
    _name_after_the_file(raw, path)
    return validate_params(raw, source=str(path))


def _name_after_the_file(raw: dict[str, Any], path: Path) -> None:
    """A set that names no ``experiment.name`` is named after its file (``params/mine.yaml``: ``mine``),
    so that its runs get an MLflow experiment of their own rather than the default set's."""
    experiment = raw.get("experiment")
    if experiment is None:
        raw["experiment"] = experiment = {}
    if isinstance(experiment, dict) and "name" not in experiment:
        experiment["name"] = path.stem


def arm_params(params: Params, name: str) -> Params:
    """The set as arm ``name`` trains it: its overrides applied (a preset's keys spelled out, since
    every key of a dumped set is already there) and validated."""
    arm = params.ablation.arm(name)
    raw = params.model_dump(mode="json")
    preset = arm.overrides.get("rl.preset")
    spelled = preset_values(preset, params.rl.sampling.max_completion_length) if preset in PRESETS else {}
    for key, value in {**spelled, **arm.overrides}.items():
        set_dotted(raw, key, value)
    try:
        return validate_params(raw, source=f"arm {name!r}")
    except ConfigError as exc:
        raise ConfigError(f"{exc}\n(with the overrides of arm {name!r}: {arm.overrides})") from None
