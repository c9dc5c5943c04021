"""The configuration reference, generated from the schema so the two never drift."""

from __future__ import annotations

from pydantic import BaseModel

from grpoflow.config.base import value_at
from grpoflow.config.params import Params


def describe_schema(model: type[BaseModel] = Params, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted key, default, description)`` for every field: the configuration reference."""
    rows: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.extend(describe_schema(ann, prefix=f"{key}."))
        else:
            rows.append((key, repr(field.get_default(call_default_factory=True)), field.description or ""))
    return rows


def schema_markdown(demo: Params | None = None) -> str:
    """The configuration table, generated from the schema so the two never drift; with ``demo``
    (params/default.yaml) a column shows where the demo departs from the schema's default."""
    rows = ["| key | default | params/default.yaml | description |", "|---|---|---|---|"]
    for key, default, desc in describe_schema():
        mine = repr(value_at(demo, key)) if demo is not None else default
        rows.append(f"| `{key}` | `{default}` | {'' if mine == default else f'`{mine}`'} | {desc} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m grpoflow.config.docs: the table of docs/configuration.md
    from grpoflow.config.loader import load_params

    print(schema_markdown(load_params("params/default.yaml")))
