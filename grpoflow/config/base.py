"""What every section shares: the frozen, closed pydantic base, the load error, the wording of an
unknown name (with a did-you-mean), an algorithm's name, the typed options some code reads from a
section's fields (:func:`options_of`), and the dotted-key helpers of raw params mappings."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from copy import copy
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, create_model, model_validator

from grpoflow import catalog


class ConfigError(ValueError):
    """A params file that does not validate; the message names the file and each bad key."""


def unknown_name(what: str, name: str, known: list[str]) -> str:
    """'unknown <what> <name> (did you mean ...?); registered: [...]' for a name not in ``known``."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {what} {name!r}{hint}; registered: {known}"


@dataclass(frozen=True)
class Choices:
    """Marks an annotated field whose values are the names ``names()`` returns when it is validated (a
    name table that is no ``Literal``); the configuration reference lists them as its choices."""

    names: Callable[[], list[str]]


def _known_algorithm(name: str) -> str:
    if name not in catalog.ALGORITHMS:
        raise ValueError(unknown_name("algorithm", name, catalog.names()))
    return name


# An algorithm of grpoflow.catalog, checked when the value is validated (the catalog as it is then).
AlgorithmName = Annotated[str, AfterValidator(_known_algorithm), Choices(catalog.names)]


class _Section(BaseModel):
    """A section of params: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _complete(cls, raw: Any) -> Any:
        """A nested section given in part keeps what its field's default sets for the keys it leaves
        out: ``rl.engine: {zero_stage: 2}`` keeps rl.engine.lr = 2e-4, where the class alone would
        give EngineConfig's 1e-3 and silently multiply the step size by five."""
        if not isinstance(raw, dict):
            return raw
        out = dict(raw)
        for name, given in raw.items():
            field = cls.model_fields.get(name)
            if field is None or field.default_factory is None or not isinstance(given, dict):
                continue
            default = field.get_default(call_default_factory=True)
            if isinstance(default, _Section) and default.model_fields_set:
                out[name] = {
                    **cls._kept_of_default(default.model_dump(include=default.model_fields_set), given),
                    **given,
                }
        return out

    @classmethod
    def _kept_of_default(cls, default: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        """What of a nested section's default stays under the keys ``given`` spells: all of it, unless
        a section's keys exclude one another (tune's ranges: ``choices`` or ``low``/``high``)."""
        return default


class SectionOptions(_Section):
    """Typed options that some code (an advantage estimator) reads from fields of a params section,
    each named by the option it is (``option_keys``: option name -> the section's key). Built by
    :func:`options_of`, so that each option is declared once, as the section's field."""

    option_keys: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse an option declared in the class itself: a second declaration beside the section's field."""
        super().__pydantic_init_subclass__(**kwargs)
        if own := sorted(set(cls.model_fields) - set(cls.option_keys)):
            raise TypeError(f"{cls.__name__} declares {own} itself: an option is a section's field (options_of)")

    @classmethod
    def read(cls, section: BaseModel) -> Self:
        """These options, each the value of its key in ``section``."""
        return cls(**{name: getattr(section, key) for name, key in cls.option_keys.items()})


def options_of(
    section: type[BaseModel], *keys: str, prefix: str = "", base: type[SectionOptions] = SectionOptions
) -> Any:
    """A base class for options read from ``section``'s fields ``keys`` (besides ``base``'s), each named
    as its key without ``prefix``: the field's type, default, bounds and description are the section's own
    (one declaration, which the configuration reference shows), never stated again for the option.

    Subclass it (``class GaeOptions(options_of(PPOConfig, "gamma", ...)):``) to name the options and
    add what they compute; typed ``Any``, as a class pydantic builds at run time is to mypy."""
    names = {key: key.removeprefix(prefix) for key in keys}
    fields: dict[str, Any] = {
        names[key]: (section.model_fields[key].annotation, copy(section.model_fields[key])) for key in keys
    }
    option_keys = {**base.option_keys, **{name: key for key, name in names.items()}}
    return create_model(
        f"{section.__name__}Options",
        __base__=base,
        __module__=section.__module__,
        __namespace__={"option_keys": option_keys},
        **fields,
    )


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``dotted`` (e.g. ``rl.steps``) in a raw params mapping, creating sections on the way."""
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: '{part}' is not a section")
    node[leaf] = value


def has_dotted(raw: dict[str, Any], dotted: str) -> bool:
    """Whether a raw params mapping spells out ``dotted`` (e.g. ``rl.steps``) itself."""
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def value_at(params: BaseModel, dotted: str) -> Any:
    """The value of ``dotted`` (e.g. ``rl.engine.lr``) in a validated set."""
    node: Any = params
    for part in dotted.split("."):
        node = getattr(node, part)
    return node
