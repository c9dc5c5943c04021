"""The configuration reference, generated from the schema so the two never drift.

Each field is a row with its type, what values it allows (ranges from ``ge``/``gt``/``le``/``lt``,
list lengths, the choices of a ``Literal``), its default, an example where the schema gives one
(pydantic's ``examples=``) and its description. A field that holds
sections (a list of them, a mapping of names to them, or one that may be null) gets a row of its
own and then a row per field of the section: ``data.sources[].kind``, ``model.lora.rank``,
``ablation.custom_arms.<name>.algorithm``."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from grpoflow.config.base import Choices, value_at
from grpoflow.config.params import Params

_ABSENT = object()  # a demo value that does not exist (inside a list, or under a null section)


@dataclass(frozen=True)
class SchemaRow:
    """One row of the configuration reference."""

    key: str  # dotted, with [] for an item of a list and .<name> for an entry of a mapping
    type: str
    allowed: str  # the range, length or choices the field accepts ('' when anything of its type)
    default: str
    description: str
    dotted: str | None  # the key value_at reads in a validated set; None inside a list or mapping
    example: str = ""  # the field's first schema example, shown as the reference shows values


def _is_model(ann: Any) -> bool:
    return isinstance(ann, type) and issubclass(ann, BaseModel)


def _nested(ann: Any) -> tuple[type[BaseModel], str] | None:
    """The section a field holds besides itself, and how its keys continue: ``[]`` for an item of a
    list, ``.<name>`` for an entry of a mapping, ``''`` for a section that may be null."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is list and args and _is_model(args[0]):
        return args[0], "[]"
    if origin is dict and len(args) == 2 and _is_model(args[1]):
        return args[1], ".<name>"
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and _is_model(inner[0]):
            return inner[0], ""
    return None


def _type_text(ann: Any) -> str:
    """A short spelling of an annotation: ``int``, ``list[str]``, ``str | None``, ``SourceConfig``."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        return _type_text(args[0])
    if origin is Literal:
        return " | ".join(sorted({type(a).__name__ for a in args}))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_text(a) for a in args)}]"
    if ann is type(None):
        return "None"
    if ann is Any:
        return "any"
    return getattr(ann, "__name__", str(ann))


def _choices(ann: Any) -> list[Any]:
    """The values of the first ``Literal`` or :class:`Choices` inside an annotation (its items' choices
    for a list)."""
    if get_origin(ann) is Literal:
        return list(get_args(ann))
    if get_origin(ann) is Annotated and (marked := _marked_choices(get_args(ann)[1:])):
        return marked
    for arg in get_args(ann):
        if found := _choices(arg):
            return found
    return []


def _marked_choices(metadata) -> list[Any]:
    """The names of a :class:`Choices` among an annotation's ``metadata`` (none: empty)."""
    return next((meta.names() for meta in metadata if isinstance(meta, Choices)), [])


_BOUNDS = ((at.Ge, "ge", ">="), (at.Gt, "gt", ">"), (at.Le, "le", "<="), (at.Lt, "lt", "<"))


def _allowed_text(field: FieldInfo) -> str:
    """The field's range, list length and choices, e.g. ``>= 0, <= 1`` or ``one of 'fail', 'drop'``."""
    parts = []
    for meta in field.metadata:
        for kind, attr, sign in _BOUNDS:
            if isinstance(meta, kind):
                parts.append(f"{sign} {getattr(meta, attr)}")
        if isinstance(meta, at.MinLen):
            parts.append(f"at least {meta.min_length} item{'s' if meta.min_length != 1 else ''}")
        if isinstance(meta, at.MaxLen):
            parts.append(f"at most {meta.max_length} items")
    choices = _marked_choices(field.metadata) or _choices(field.annotation)
    if choices:
        each = "each " if get_origin(field.annotation) is list else ""
        parts.append(f"{each}one of {', '.join(repr(c) for c in choices)}")
    return ", ".join(parts)


def _shown(value: Any) -> str:
    """A value as the reference shows it; a section by the keys it sets beyond its defaults."""

    def plain(v: Any) -> Any:
        if isinstance(v, BaseModel):
            return v.model_dump(mode="json", exclude_defaults=True)
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return repr(plain(value))


def schema_rows(
    model: type[BaseModel] = Params, prefix: str = "", dotted: bool = True, defaults: BaseModel | None = None
) -> list[SchemaRow]:
    """Every row of the configuration reference, nested sections expanded. ``defaults`` is the
    section's default value where its field sets one (``rl.engine``'s lr is 2e-4, not
    EngineConfig's own 1e-3): a key left out of a set takes that."""
    rows: list[SchemaRow] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        own = None if field.is_required() else field.get_default(call_default_factory=True)
        value = getattr(defaults, name) if defaults is not None else own
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(schema_rows(ann, f"{key}.", dotted, value))
            continue
        default = "required" if field.is_required() and defaults is None else _shown(value)
        example = _shown(field.examples[0]) if field.examples else ""
        row = SchemaRow(
            key,
            _type_text(ann),
            _allowed_text(field),
            default,
            field.description or "",
            key if dotted else None,
            example,
        )
        rows.append(row)
        if nested := _nested(ann):
            section, how = nested
            rows.extend(schema_rows(section, f"{key}{how}.", dotted and how == ""))
    return rows


def _demo_value(demo: Params, dotted: str | None) -> Any:
    """The value at ``dotted`` in the demo set; absent inside a list or mapping, or under a null section."""
    if dotted is None:
        return _ABSENT
    parent, _, _ = dotted.rpartition(".")
    if parent and value_at(demo, parent) is None:
        return _ABSENT
    return value_at(demo, dotted)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def schema_markdown(demo: Params | None = None) -> str:
    """The configuration table, generated from the schema so the two never drift; with ``demo``
    (params/default.yaml) a column shows where the demo departs from the schema's default."""
    rows = [
        "| key | type | allowed | default | params/default.yaml | example | description |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in schema_rows():
        mine = _demo_value(demo, r.dotted) if demo is not None else _ABSENT
        differs = mine is not _ABSENT and _shown(mine) != r.default
        allowed = f"`{_cell(r.allowed)}`" if r.allowed else ""
        theirs = f"`{_cell(_shown(mine))}`" if differs else ""
        example = f"`{_cell(r.example)}`" if r.example else ""
        rows.append(
            f"| `{r.key}` | `{_cell(r.type)}` | {allowed} | `{_cell(r.default)}` | {theirs} | {example} "
            f"| {_cell(r.description)} |"
        )
    return "\n".join(rows)


REFERENCE = "docs/configuration.md"


def write_reference(path: str = REFERENCE, demo: str = "params/default.yaml") -> None:
    """Replace the configuration table in ``path`` (the first block of table rows from its header
    on) with :func:`schema_markdown` of the schema as it is now (a new algorithm's section included)."""
    from pathlib import Path

    from grpoflow.config.loader import load_params

    lines = Path(path).read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("| key | type |"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    lines[start:end] = schema_markdown(load_params(demo)).split("\n")
    Path(path).write_text("\n".join(lines))


if __name__ == "__main__":  # python -m grpoflow.config.docs [--write]: the table of docs/configuration.md
    import sys

    if "--write" in sys.argv[1:]:
        write_reference()
        print(f"wrote the configuration table of {REFERENCE}")
    else:
        from grpoflow.config.loader import load_params

        print(schema_markdown(load_params("params/default.yaml")))
