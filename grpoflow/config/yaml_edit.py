"""Set keys in a parameter file's YAML text and keep the rest of the text as it was written: its
comments (the documentation of every setting), quotes, key order and layout.

A run with overrides writes them into the set itself, as ``dvc exp run --set-param`` does, since DVC
reads a stage's params from that file; the experiment DVC saves keeps that text, and ``dvc exp apply``
brings it back. A plain ``yaml.dump`` would drop every comment there. This is a round trip through
ruamel.yaml (DVC's own YAML library) set to the layout of the project's files: two-space mappings,
lists indented under their key, ``null`` written out.
"""

from __future__ import annotations

import io
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap


def _round_trip() -> YAML:
    yaml = YAML()  # round trip: comments, order and flow style kept
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long value onto a second line
    yaml.indent(mapping=2, sequence=4, offset=2)  # "  - name: math" under "rewards:", as the sets write it
    yaml.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    yaml.representer.add_representer(str, _string)
    yaml.representer.add_representer(float, _float)
    return yaml


def _float(representer: Any, value: float) -> Any:
    """A float as PyYAML reads one back: YAML 1.1 takes ``1e-05`` for a string and wants ``1.0e-05``."""
    if value != value:
        text = ".nan"
    elif value in (float("inf"), float("-inf")):
        text = ".inf" if value > 0 else "-.inf"
    else:
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:
            text = f"{mantissa}.0e{exponent}"
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _string(representer: Any, value: str) -> Any:
    """A new string value, quoted where the project's reader would take it for something else: ruamel
    writes YAML 1.2, and PyYAML reads 1.1, where ``NO`` is false and ``1_000`` a number. A value with a
    character a single-quoted scalar folds or cannot hold (a line break such as U+0085, a control
    character) is double-quoted, where it is written as an escape."""
    try:
        plain_reads_back = pyyaml.safe_load(value) == value
    except pyyaml.YAMLError:
        plain_reads_back = False
    style = None if plain_reads_back else "'" if value.isprintable() else '"'
    return representer.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def set_keys(text: str, values: dict[str, Any]) -> str:
    """``text`` with each dotted key of ``values`` (``rl.steps``) set, sections made where missing,
    and everything else as written."""
    yaml = _round_trip()
    tree = yaml.load(text) or CommentedMap()
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = tree
        for part in parents:
            if part not in node or node[part] is None:
                node[part] = CommentedMap()
            node = node[part]
        node[leaf] = value
    out = io.StringIO()
    yaml.dump(tree, out)
    return out.getvalue()
